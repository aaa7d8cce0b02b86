#!/usr/bin/env bash
# Install PINNED harness CLIs from the npm registry into the git-ignored .cache/harnesses/,
# for the end-to-end tests (tests/e2e). Idempotent: a package already at its pinned version is
# not touched, so a second run takes well under a second.
#
# usage: scripts/install-harnesses.sh [NAME|all]...   (default: all; the names: the harness
#        table's rows with a pinned CLI, `python -m supervisor._harnesses pins`)
# env:   HARNESS_CACHE  install root (default: <repo>/.cache/harnesses)
# Without npm it prints one line and exits 0 (the e2e tests then skip with that reason), or 1
# under CI (CI set to anything but empty/0/false: the e2e tests never skip there).
# The pins are the harness table's (supervisor/_harnesses.py): each row's `newest` version
# goes into the cache itself, with the row's `npm_extra` packages for this platform (a
# platform binary published under another version); its `floor` (the oldest version
# supported), where it differs, into the second pinned set <cache>/floor, which the floor
# tests run.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${HARNESS_CACHE:-$ROOT/.cache/harnesses}"

in_ci() { case "$(printf %s "${CI:-}" | tr -d "[:space:]" | tr "[:upper:]" "[:lower:]")" in ""|0|false|no) return 1 ;; *) return 0 ;; esac; }

if ! command -v npm >/dev/null 2>&1; then
  if in_ci; then
    echo "install-harnesses: npm not found; under CI the end-to-end harness tests cannot skip" >&2
    exit 1
  fi
  echo "install-harnesses: npm not found; end-to-end harness tests will skip" >&2
  exit 0
fi
PY="$(command -v python3 || command -v python)" || { echo "install-harnesses: no python3" >&2; exit 2; }
# "name package newest floor extra label..." a line (extra: "pkg@v,pkg@v" or "-")
PINS="$(cd "$ROOT" && PYTHONPATH="$ROOT" "$PY" -m supervisor._harnesses pins)" && [ -n "$PINS" ] || {
  echo "install-harnesses: cannot read the harness table (supervisor/_harnesses.py)" >&2; exit 2; }

targets=("$@"); [ ${#targets[@]} -eq 0 ] && targets=(all)
if [ "${targets[0]}" = all ]; then
  targets=()
  while read -r name _; do targets+=("$name"); done <<<"$PINS"
fi

mkdir -p "$CACHE/floor"
[ -f "$CACHE/package.json" ] || printf '{"name":"watchkeeper-harnesses","private":true}\n' >"$CACHE/package.json"
[ -f "$CACHE/floor/package.json" ] || printf '{"name":"watchkeeper-harnesses-floor","private":true}\n' >"$CACHE/floor/package.json"

installed_version() {  # installed_version DIR PKG -> version from DIR/node_modules, or empty
  local f="$1/node_modules/$2/package.json"
  [ -f "$f" ] && sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | head -n 1
}

want=(); names=(); dirs=()
for t in "${targets[@]}"; do
  line="$(grep "^$t " <<<"$PINS")" || { echo "install-harnesses: unknown harness '$t'" >&2; exit 2; }
  read -r _ pkg ver floor extra label <<<"$line"
  for set in newest floor; do
    dir="$CACHE"; v="$ver"; what="$t"; more=""
    if [ "$set" = floor ]; then
      [ "$floor" = "$ver" ] && continue  # the floor is the newest: one install serves both
      dir="$CACHE/floor"; v="$floor"; what="$t (floor)"
    elif [ "$extra" != - ]; then
      more="${extra//,/ }"
    fi
    missing=""
    [ "$(installed_version "$dir" "$pkg")" = "$v" ] || missing=1
    for spec in $more; do  # "@scope/name@1.2.3": the version follows the last @
      [ "$(installed_version "$dir" "${spec%@*}")" = "${spec##*@}" ] || missing=1
    done
    if [ -z "$missing" ]; then
      echo "install-harnesses: $what ($pkg@$v${more:+ $more}) already installed"
    else
      want+=("$pkg@$v${more:+ $more}"); names+=("$what: $label"); dirs+=("$dir")
    fi
  done
done
[ ${#want[@]} -eq 0 ] && exit 0

echo "install-harnesses: the end-to-end tests (tests/e2e) drive the real harness CLIs against a"
echo "install-harnesses: local fake model, so the pinned versions are installed once from npm into"
echo "install-harnesses: $CACHE (git-ignored; about 2.6 GB for all of them and the floor set, a"
echo "install-harnesses: minute or more depending on the network). \`pytest -m \"not e2e\"\` needs none."
: >"$CACHE/install.log"
total=${#want[@]}; start_all=$SECONDS
for i in "${!want[@]}"; do
  n=$((i + 1)); start=$SECONDS
  echo "install-harnesses: [$n/$total] ${names[$i]} ${want[$i]} ..."
  read -r -a specs <<<"${want[$i]}"  # the pin, then its npm_extra packages
  if ! (cd "${dirs[$i]}" && npm install --no-audit --no-fund --save-exact --loglevel=error \
        "${specs[@]}" >>"$CACHE/install.log" 2>&1); then
    if in_ci; then then_what="under CI the e2e tests that need it fail"
    else then_what="e2e tests that need it will skip"; fi
    echo "install-harnesses: npm install ${want[$i]} failed (see $CACHE/install.log); $then_what" >&2
    tail -n 20 "$CACHE/install.log" >&2
    exit 1
  fi
  echo "install-harnesses: [$n/$total] ${names[$i]%%:*} installed in $((SECONDS - start))s"
done
size="$(du -sh "$CACHE" 2>/dev/null | cut -f1)"
echo "install-harnesses: done in $((SECONDS - start_all))s (${size:-?} in $CACHE)"
