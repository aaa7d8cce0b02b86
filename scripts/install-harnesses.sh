#!/usr/bin/env bash
# Install PINNED harness CLIs from the npm registry into the git-ignored .cache/harnesses/,
# for the end-to-end tests (tests/e2e). Idempotent: a package already at its pinned version is
# not touched, so a second run takes well under a second.
#
# usage: scripts/install-harnesses.sh [claude|codex|gemini|pi|opencode|all]...   (default: all)
# env:   HARNESS_CACHE  install root (default: <repo>/.cache/harnesses)
# Without npm it prints one line and exits 0 (the e2e tests then skip with that reason), or 1
# under CI (CI set to anything but empty/0/false: the e2e tests never skip there).
# Versions are the ones observed in the harness lab (brief: harnesses.md); npm's "latest" moves.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${HARNESS_CACHE:-$ROOT/.cache/harnesses}"

pin() {  # pin NAME -> "npm-package version"
  case "$1" in
    claude)   echo "@anthropic-ai/claude-code 2.1.197" ;;
    codex)    echo "@openai/codex 0.171.0" ;;
    gemini)   echo "@google/gemini-cli 0.61.0" ;;
    pi)       echo "@mariozechner/pi-coding-agent 0.73.1" ;;
    opencode) echo "opencode-ai 1.18.33" ;;
    *) return 1 ;;
  esac
}

in_ci() { case "$(printf %s "${CI:-}" | tr -d "[:space:]" | tr "[:upper:]" "[:lower:]")" in ""|0|false|no) return 1 ;; *) return 0 ;; esac; }

if ! command -v npm >/dev/null 2>&1; then
  if in_ci; then
    echo "install-harnesses: npm not found; under CI the end-to-end harness tests cannot skip" >&2
    exit 1
  fi
  echo "install-harnesses: npm not found; end-to-end harness tests will skip" >&2
  exit 0
fi

targets=("$@"); [ ${#targets[@]} -eq 0 ] && targets=(all)
[ "${targets[0]}" = all ] && targets=(claude codex gemini pi opencode)

mkdir -p "$CACHE"
[ -f "$CACHE/package.json" ] || printf '{"name":"watchkeeper-harnesses","private":true}\n' >"$CACHE/package.json"

installed_version() {  # installed_version PKG -> version from node_modules, or empty
  local f="$CACHE/node_modules/$1/package.json"
  [ -f "$f" ] && sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | head -n 1
}

title() {  # title NAME -> what the package is
  case "$1" in
    claude) echo "Claude Code CLI" ;; codex) echo "Codex CLI" ;; gemini) echo "Gemini CLI" ;;
    pi) echo "Pi coding agent" ;; opencode) echo "OpenCode" ;;
  esac
}

want=(); names=()
for t in "${targets[@]}"; do
  spec="$(pin "$t")" || { echo "install-harnesses: unknown harness '$t'" >&2; exit 2; }
  pkg="${spec% *}"; ver="${spec#* }"
  if [ "$(installed_version "$pkg")" = "$ver" ]; then
    echo "install-harnesses: $t ($pkg@$ver) already installed"
  else
    want+=("$pkg@$ver"); names+=("$t")
  fi
done
[ ${#want[@]} -eq 0 ] && exit 0

echo "install-harnesses: the end-to-end tests (tests/e2e) drive the real harness CLIs against a"
echo "install-harnesses: local fake model, so the pinned versions are installed once from npm into"
echo "install-harnesses: $CACHE (git-ignored; about 1.3 GB for all five, a minute or more"
echo "install-harnesses: depending on the network). \`pytest -m \"not e2e\"\` needs none of them."
: >"$CACHE/install.log"
total=${#want[@]}; start_all=$SECONDS
for i in "${!want[@]}"; do
  n=$((i + 1)); start=$SECONDS
  echo "install-harnesses: [$n/$total] ${names[$i]}: $(title "${names[$i]}") ${want[$i]} ..."
  if ! (cd "$CACHE" && npm install --no-audit --no-fund --save-exact --loglevel=error \
        "${want[$i]}" >>"$CACHE/install.log" 2>&1); then
    echo "install-harnesses: npm install ${want[$i]} failed (see $CACHE/install.log);" \
         "e2e tests that need it will skip" >&2
    tail -n 20 "$CACHE/install.log" >&2
    exit 1
  fi
  echo "install-harnesses: [$n/$total] ${names[$i]} installed in $((SECONDS - start))s"
done
size="$(du -sh "$CACHE/node_modules" 2>/dev/null | cut -f1)"
echo "install-harnesses: done in $((SECONDS - start_all))s (${size:-?} in $CACHE/node_modules)"
