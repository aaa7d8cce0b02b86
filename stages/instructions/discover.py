"""Which instruction files each harness loads by itself, and which ones this stage can supply.

Every function returns a deterministic, ordered list of absolute paths (not resolved), each an
existing regular file; callers de-duplicate by real path. Sources for each convention:

* Claude Code (code.claude.com/docs/en/memory): managed policy file, ``~/.claude/CLAUDE.md``,
  ``~/.claude/rules/*.md``, then from the filesystem root down to cwd: ``CLAUDE.md``,
  ``.claude/CLAUDE.md``, ``.claude/rules/*.md``, ``CLAUDE.local.md``; ``@imports`` expanded.
  It lives in the system prompt and survives compaction.
* Codex (openai/codex ``project_doc``): global ``$CODEX_HOME/AGENTS.override.md`` else
  ``AGENTS.md`` (first non-empty); then from the project root (nearest ``.git``) down to cwd,
  one file per directory: ``AGENTS.override.md`` > ``AGENTS.md`` > ``project_doc_fallback_filenames``,
  empty files skipped, no more files once ``project_doc_max_bytes`` (32 KiB) is reached.
* OpenCode (opencode.ai/docs/rules): ``~/.config/opencode/AGENTS.md`` else ``~/.claude/CLAUDE.md``;
  from cwd up to the project root, ``AGENTS.md`` else ``CLAUDE.md`` per directory (CLAUDE.md
  files are skipped with ``OPENCODE_DISABLE_CLAUDE_CODE_PROMPT``, project files with
  ``OPENCODE_DISABLE_PROJECT_CONFIG``). No imports.
* Pi (pi-mono ``resource-loader.ts``): the agent dir (``PI_CODING_AGENT_DIR``, default
  ``~/.pi/agent``), then cwd and every ancestor up to ``/``, one file per directory, the first of
  ``AGENTS.override.md``, ``AGENTS.md``, ``AGENTS.MD``, ``CLAUDE.md``, ``CLAUDE.MD``. No imports.
* Gemini CLI (gemini-cli 0.61 ``memoryDiscovery.ts``/``memoryTool.ts``): the context file
  names (``context.fileName``, a string or a list, default ``GEMINI.md``; legacy top-level
  ``contextFileName``) from the system, user (``~/.gemini``) and workspace (``.gemini``)
  ``settings.json``, the workspace winning; ``~/.gemini/<name>``, then every name in each
  directory from cwd up to the git root (no git: cwd only). It expands ``@imports`` itself.
* Qwen Code (qwen-code ``memoryTool.ts``, PR #2018): as Gemini, with ``~/.qwen`` and
  ``.qwen/settings.json``, default names ``QWEN.md`` and ``AGENTS.md``; imports expanded.
* Cursor (cursor.com/docs/rules, CLI docs): ``.cursor/rules`` (its own ``.mdc`` rules) and
  ``AGENTS.md`` and ``CLAUDE.md`` at the project root; nested ``AGENTS.md`` are applied by
  Cursor itself when it works on files below them. No imports.
* Grok CLI (superagent-ai/grok-cli ``src/utils/instructions.ts``): ``~/.grok/AGENTS.md``,
  then from the git root (no git: cwd) down to cwd, ``AGENTS.override.md`` (when present,
  even empty) else ``AGENTS.md``, per directory; the older ``@vibe-kit/grok-cli`` reads
  ``.grok/GROK.md`` in cwd. No imports.
* GitHub Copilot CLI (LAB 1.0.102, and docs.github.com "custom instructions"):
  ``$COPILOT_HOME/copilot-instructions.md``; ``AGENTS.md``, ``CLAUDE.md`` and ``GEMINI.md``
  from the git root (no git: cwd) down to cwd; the root's ``.github/copilot-instructions.md``
  and ``.github/instructions/*.instructions.md``. No imports.
* Factory Droid (LAB 0.225.2): ``~/.factory/AGENTS.md``, then ``AGENTS.md`` and ``CLAUDE.md``
  from the git root (no git: cwd) down to cwd. No imports.
* Cline CLI (LAB 3.0.65): in the workspace folder only (no folder above it), ``AGENTS.md``
  and the files of ``.clinerules/`` and ``.cline/rules/``; ``~/Documents/Cline/Rules/`` and
  ``~/.cline/rules/``. No imports.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from instructions.files import (Place, examine, file_size, find_git_root, is_regular, is_within,
                                present, read_instruction, rules_in)

CODEX_PROJECT_DOC_MAX_BYTES = 32 * 1024
_CLAUDE_DIR_FILES = ("CLAUDE.md", ".claude/CLAUDE.md")
_PI_CANDIDATES = ("AGENTS.override.md", "AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD")


def _nonempty(path: Path) -> bool:
    content = read_instruction(path)
    return content is not None and bool(content.text.strip())


def _supplied(path: Path) -> bool:
    """A project candidate the stage supplies or names: non-empty text, or present but not
    readable as text (a link out of the project, a FIFO, an oversized or binary file), which
    the stage then names with its reason instead of letting it disappear (issue 11 item 7)."""
    if not present(path):
        return False
    content, why = examine(path)
    return bool(why) if content is None else bool(content.text.strip())


def _rules(directory: Path, root: Path | None = None) -> list[Path]:
    """``<directory>/*.md`` rule files (recursive, sorted by relative path; regular files, a
    bounded walk that leaves ``root`` never: :func:`instructions.files.rules_in`)."""
    return [p for p in rules_in(directory, (".md",), root) if is_regular(p)]


def _ancestors_down(cwd: Path) -> list[Path]:
    """Filesystem root, then each directory down to ``cwd``."""
    return [*reversed(cwd.parents), cwd]


def claude_managed() -> Path:
    """The managed-policy CLAUDE.md for this OS."""
    if sys.platform == "darwin":
        return Path("/Library/Application Support/ClaudeCode/CLAUDE.md")
    return Path("/etc/claude-code/CLAUDE.md")


def claude_loads(place: Place) -> list[Path]:
    """Files Claude Code loads into its system prompt (before imports)."""
    user = user_folder(place, "claude")
    out = [claude_managed(), user / "CLAUDE.md", *_rules(user / "rules")]
    for d in _ancestors_down(place.cwd):
        inside = place.root if is_within(d, place.root) else None  # the tree: confined
        out += [d / "CLAUDE.md", d / ".claude" / "CLAUDE.md",
                *_rules(d / ".claude" / "rules", inside), d / "CLAUDE.local.md"]
    return [p for p in out if is_regular(p)]


def _claude_file(d: Path) -> bool:
    """``d`` holds a CLAUDE.md, .claude/CLAUDE.md or CLAUDE.local.md with text in it (an
    empty one does not keep Claude Code from loading AGENTS.md)."""
    return any(is_regular(p) and _nonempty(p)
               for p in (*(d / n for n in _CLAUDE_DIR_FILES), d / "CLAUDE.local.md"))


def claude_agents_loads(place: Place) -> list[Path]:
    """Files Claude Code >= 2.1.281 loads: :func:`claude_loads`, and when no directory from
    the filesystem root down to cwd holds a non-empty CLAUDE file, each of those directories'
    ``AGENTS.md`` (not ``AGENTS.override.md``; imports expanded). Proved with the real CLI
    (``-p`` and interactive; the harness table's era for Claude)."""
    out = claude_loads(place)
    dirs = _ancestors_down(place.cwd)
    if any(_claude_file(d) for d in dirs):
        return out
    return out + [d / "AGENTS.md" for d in dirs if is_regular(d / "AGENTS.md")]


def user_folder(place: Place, harness: str) -> Path:
    """``harness``'s user folder (``$CODEX_HOME``, else ``~/.codex``): the harness table's
    rule, :meth:`supervisor._harnesses.Harness.user_folder`, below ``place.home``."""
    from supervisor._harnesses import BY_NAME

    return Path(BY_NAME[harness].user_folder(str(place.home)))


def codex_home(place: Place) -> Path:
    """Codex's user folder (``$CODEX_HOME``, else ``~/.codex``)."""
    return user_folder(place, "codex")


def codex_settings(place: Place) -> tuple[tuple[str, ...], int]:
    """``(project_doc_fallback_filenames, project_doc_max_bytes)`` from Codex's config.toml."""
    import tomllib  # only for Codex: its regular expressions would cost every other digest

    from supervisor._errors import ConfigError
    from supervisor.state._fsutil import read_small_file

    try:  # never blocking on a FIFO, capped (the guarded read of a small user file)
        data = read_small_file(codex_home(place) / "config.toml", 1 << 20,
                               what="a Codex config file", missing_ok=True)
        cfg = tomllib.loads(data.decode("utf-8")) if data else {}
    except (ConfigError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return (), CODEX_PROJECT_DOC_MAX_BYTES
    fallbacks = cfg.get("project_doc_fallback_filenames", [])
    if not isinstance(fallbacks, list):
        fallbacks = []
    cap = cfg.get("project_doc_max_bytes", CODEX_PROJECT_DOC_MAX_BYTES)
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
        cap = CODEX_PROJECT_DOC_MAX_BYTES
    return tuple(str(f) for f in fallbacks if isinstance(f, str) and f), cap


def codex_loads(place: Place) -> list[Path]:
    """Files Codex loads: the global one, then its project chain up to its byte cap."""
    out: list[Path] = []
    home = codex_home(place)
    for name in ("AGENTS.override.md", "AGENTS.md"):
        if is_regular(home / name) and _nonempty(home / name):
            out.append(home / name)
            break
    fallbacks, cap = codex_settings(place)
    git_root = find_git_root(place.cwd)
    dirs = Place(place.cwd, git_root, place.home).dirs_root_to_cwd() if git_root else [place.cwd]
    used = 0
    for d in dirs:
        if used >= cap:
            break  # Codex stops adding project docs once its budget is spent
        for name in ("AGENTS.override.md", "AGENTS.md", *fallbacks):
            p = d / name
            if is_regular(p) and _nonempty(p):
                out.append(p)
                used += max(file_size(p), 0)
                break
    return out


def opencode_loads(place: Place) -> list[Path]:
    """Files OpenCode loads: the global one, then AGENTS.md (else CLAUDE.md) per directory."""
    no_claude = bool(os.environ.get("OPENCODE_DISABLE_CLAUDE_CODE_PROMPT"))
    config = user_folder(place, "opencode")
    out: list[Path] = []
    for p in (config / "opencode" / "AGENTS.md",
              *(() if no_claude else (place.home / ".claude" / "CLAUDE.md",))):
        if is_regular(p):
            out.append(p)
            break
    if os.environ.get("OPENCODE_DISABLE_PROJECT_CONFIG"):
        return out
    for d in reversed(place.dirs_root_to_cwd()):  # nearest first, as OpenCode orders them
        for name in ("AGENTS.md", *(() if no_claude else ("CLAUDE.md",))):
            if is_regular(d / name):
                out.append(d / name)
                break
    return out


def pi_loads(place: Place) -> list[Path]:
    """Files Pi loads: the agent dir's file, then one per directory from ``/`` down to cwd."""
    agent_dir = user_folder(place, "pi")
    out: list[Path] = []
    for d in (agent_dir, *_ancestors_down(place.cwd)):
        for name in _PI_CANDIDATES:
            if is_regular(d / name):
                out.append(d / name)
                break
    return out


def _settings_names(paths: list[Path], default: tuple[str, ...]) -> tuple[str, ...]:
    """Context file names from Gemini-style ``settings.json`` files (later files win).

    ``context.fileName`` (string or list of strings) or the legacy top-level
    ``contextFileName``; an unreadable, non-JSON or oddly typed file is ignored, and so is a
    FIFO, device or oversized file (read through :func:`examine`: never blocking, capped; a
    planted ``.gemini/settings.json`` FIFO used to hold the stage until the budget killed it).
    """
    names = default
    for path in paths:
        content = examine(path)[0]
        if content is None:
            continue
        import json  # only with a settings file: its regular expressions cost every digest

        try:
            data = json.loads(content.text)
        except (ValueError, RecursionError, MemoryError):
            continue
        if not isinstance(data, dict):
            continue
        context = data.get("context")
        value = context.get("fileName") if isinstance(context, dict) else None
        if value is None:
            value = data.get("contextFileName")
        found = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        clean = tuple(os.path.normpath(n.strip()) for n in found if isinstance(n, str) and n.strip())
        if clean:
            names = clean
    return names


def _upward_names(place: Place, names: tuple[str, ...]) -> list[Path]:
    """Every ``names`` file in each directory from the git root (cwd without git) down to cwd."""
    git_root = find_git_root(place.cwd)
    dirs = Place(place.cwd, git_root, place.home).dirs_root_to_cwd() if git_root else [place.cwd]
    return [d / n for d in dirs for n in names if is_regular(d / n)]


def gemini_names(place: Place) -> tuple[str, ...]:
    """Gemini CLI's context file names (``context.fileName``, default ``GEMINI.md``)."""
    system = os.environ.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH") or "/etc/gemini-cli/settings.json"
    return _settings_names([Path(system), user_folder(place, "gemini") / "settings.json",
                            place.root / ".gemini" / "settings.json"], ("GEMINI.md",))


def gemini_loads(place: Place) -> list[Path]:
    """Files Gemini CLI loads: ``~/.gemini/<name>``, then cwd up to the git root."""
    names = gemini_names(place)
    user = user_folder(place, "gemini")
    out = [user / n for n in names if is_regular(user / n)]
    return out + _upward_names(place, names)


def qwen_names(place: Place) -> tuple[str, ...]:
    """Qwen Code's context file names (``context.fileName``, default QWEN.md and AGENTS.md)."""
    return _settings_names([user_folder(place, "qwen") / "settings.json",
                            place.root / ".qwen" / "settings.json"], ("QWEN.md", "AGENTS.md"))


def qwen_loads(place: Place) -> list[Path]:
    """Files Qwen Code loads: ``~/.qwen/<name>``, then cwd up to the git root."""
    names = qwen_names(place)
    user = user_folder(place, "qwen")
    out = [user / n for n in names if is_regular(user / n)]
    return out + _upward_names(place, names)


def cursor_loads(place: Place) -> list[Path]:
    """Files Cursor applies itself: its ``.cursor/rules`` (root down to cwd), ``AGENTS.md``
    and ``CLAUDE.md`` at the project root, and ``AGENTS.md`` in each directory down to cwd
    (nested ones apply to work below them)."""
    from instructions.rules import rule_files

    out = [p for p in (place.root / "AGENTS.md", place.root / "CLAUDE.md") if is_regular(p)]
    out += [d / "AGENTS.md" for d in place.dirs_root_to_cwd()[1:] if is_regular(d / "AGENTS.md")]
    return out + [p for convention, p in rule_files(place) if convention == "cursor"]


def grok_loads(place: Place) -> list[Path]:
    """Files Grok CLI loads: ``~/.grok/AGENTS.md``, the AGENTS chain git root -> cwd, and
    the older CLI's ``.grok/GROK.md``."""
    out = [p for p in (user_folder(place, "grok") / "AGENTS.md",) if is_regular(p) and _nonempty(p)]
    git_root = find_git_root(place.cwd)
    dirs = Place(place.cwd, git_root, place.home).dirs_root_to_cwd() if git_root else [place.cwd]
    for d in dirs:
        override = d / "AGENTS.override.md"
        if override.exists():
            out += [override] if is_regular(override) and _nonempty(override) else []
            continue
        if is_regular(d / "AGENTS.md") and _nonempty(d / "AGENTS.md"):
            out.append(d / "AGENTS.md")
    legacy = place.cwd / ".grok" / "GROK.md"
    return out + ([legacy] if is_regular(legacy) else [])


def copilot_loads(place: Place) -> list[Path]:
    """Files GitHub Copilot CLI loads itself (LAB, 1.0.102): ``$COPILOT_HOME`` (default
    ``~/.copilot``) ``copilot-instructions.md``; ``AGENTS.md``, ``CLAUDE.md`` and ``GEMINI.md``
    in every directory from the git root (no git: cwd) down to cwd; the root's
    ``.github/copilot-instructions.md`` and ``.github/instructions/*.instructions.md``. Not
    ``AGENTS.override.md``. No imports."""
    out = [p for p in (user_folder(place, "copilot") / "copilot-instructions.md",) if is_regular(p)]
    git_root = find_git_root(place.cwd)
    root = git_root or place.cwd
    out += _upward_names(place, ("AGENTS.md", "CLAUDE.md", "GEMINI.md"))
    out += [p for p in (root / ".github" / "copilot-instructions.md",) if is_regular(p)]
    return out + [p for p in _rules(root / ".github" / "instructions", root)
                  if p.name.endswith(".instructions.md")]


def droid_loads(place: Place) -> list[Path]:
    """Files Factory Droid loads itself (LAB, 0.225.2): ``~/.factory/AGENTS.md``, then
    ``AGENTS.md`` and ``CLAUDE.md`` in every directory from the git root (no git: cwd) down to
    cwd. Not ``AGENTS.override.md``. No imports."""
    out = [p for p in (user_folder(place, "droid") / "AGENTS.md",) if is_regular(p)]
    return out + _upward_names(place, ("AGENTS.md", "CLAUDE.md"))


def cline_loads(place: Place) -> list[Path]:
    """Files Cline CLI loads itself (LAB, 3.0.65): in its workspace folder (the session's
    cwd, no folder above it) ``AGENTS.md``, every file of ``.clinerules/`` and
    ``.cline/rules/``; the user's ``~/Documents/Cline/Rules/`` and ``~/.cline/rules/``. No
    imports."""
    out = [p for p in (place.cwd / "AGENTS.md",) if is_regular(p)]
    for folder in (place.cwd / ".clinerules", place.cwd / ".cline" / "rules",
                   place.home / "Documents" / "Cline" / "Rules", user_folder(place, "cline") / "rules"):
        out += _rules(folder)
    return out


LOADERS = {
    "claude": claude_loads,
    "claude-agents": claude_agents_loads,
    "codex": codex_loads,
    "opencode": opencode_loads,
    "pi": pi_loads,
    "gemini": gemini_loads,
    "qwen": qwen_loads,
    "cursor": cursor_loads,
    "grok": grok_loads,
    "copilot": copilot_loads,
    "droid": droid_loads,
    "cline": cline_loads,
}
"""The rules a harness table row names as ``loads`` (``supervisor._harnesses``): the files the
harness loads by itself (per version: the row's ``loads_at``); whether it expands ``@imports``
in them is the row's ``imports``. A harness whose row names no rule loads nothing by itself
(the whole chain is supplied)."""


def agents_chain(place: Place) -> list[Path]:
    """The AGENTS.md chain, project root down to cwd, Codex precedence (one file per dir)."""
    out = []
    for d in place.dirs_root_to_cwd():
        for name in ("AGENTS.override.md", "AGENTS.md"):
            if _supplied(d / name):
                out.append(d / name)
                break
    return out


def claude_chain(place: Place) -> list[Path]:
    """The CLAUDE.md chain, project root down to cwd (CLAUDE.md, .claude/CLAUDE.md, local)."""
    out = []
    for d in place.dirs_root_to_cwd():
        out += [p for p in (*(d / n for n in _CLAUDE_DIR_FILES), d / "CLAUDE.local.md")
                if present(p)]
    return out


def globals_for(place: Place) -> list[Path]:
    """User-level files of each convention: Codex's global AGENTS.md and ``~/.claude/CLAUDE.md``."""
    home = codex_home(place)
    out = [p for p in (home / "AGENTS.override.md", home / "AGENTS.md") if is_regular(p)][:1]
    claude = user_folder(place, "claude") / "CLAUDE.md"
    return out + ([claude] if is_regular(claude) else [])


def supply_chain(place: Place, supply: tuple[str, ...]) -> list[Path]:
    """Candidate files in emission order: per directory (root first) the AGENTS file, then
    the CLAUDE files, each convention only when named in ``supply``."""
    agents = agents_chain(place) if "agents" in supply else []
    claude = claude_chain(place) if "claude" in supply else []
    out = []
    for d in place.dirs_root_to_cwd():
        out += [p for p in agents if p.parent == d]
        out += [p for p in claude if p.parent == d or p.parent == d / ".claude"]
    return out
