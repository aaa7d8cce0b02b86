"""``supervise doctor [HARNESS...] [--project DIR]``: is everything in place for the hook to work?

One line per check, ``ok``, ``warn`` (a caveat the tool cannot verify or fix) or ``FAIL`` with
its fix on the same line. Exit 1 if any check fails, else 0.

Checks: the config loads; the state dir is writable and git-ignored; each configured stage's
program is found (and the ``memory`` stage's store is kept out of git); per harness (the ones named, else every one with a registration of ours):
the registration is present, its command works without ``PATH``, its timeout exceeds the budget
(:data:`MIN_HEADROOM` seconds, so the budget ends first and the banner is seen), the per-prompt
and post-tool hooks are there, and the harness's trust caveats (Codex trust is read from its
``config.toml``, Gemini's folder trust from its user settings and ``trustedFolders.json``);
run in a subdirectory, a warning for a harness that would not read the root's registration
from a session started there.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

from .._exitcodes import EXIT_FAILURE, EXIT_OK
from ._cli import VerbParser, add_directory
from ..adapters import ADAPTERS, Adapter, _settings
from . import _plugins

MIN_HEADROOM = 5.0
"""Seconds a registered session-start timeout must exceed the digest budget by."""


class Check(NamedTuple):
    """One result line: ``status`` is ``ok``, ``warn`` or ``FAIL``; ``fix`` only for FAIL."""

    status: str
    subject: str
    text: str
    fix: str = ""

    def line(self) -> str:
        """The printed line."""
        fix = f" -> fix: {self.fix}" if self.fix else ""
        return f"{self.status:<4}  {self.subject}: {self.text}{fix}"


def _config_checks(project: Path) -> tuple[list[Check], Any]:
    from ..config._schema import load_config
    from .._errors import ConfigError

    try:
        config = load_config(project)
    except ConfigError as err:
        return [Check("FAIL", "config", str(err), "correct the file named above "
                      "(`supervise config --default` prints a valid example)")], None
    count = len(config.stages)
    checks = [Check("ok", "config", f"{config.source} is valid: budget {config.budget:g}s, "
                    f"{count} stage{'' if count == 1 else 's'}, {config.stages_from}")]
    from ..session._gates import scope_reason
    from ..config._plan import as_plan

    outside = scope_reason(as_plan(config), project)
    if outside:  # the hooks would stand down silently here: say so
        checks.append(Check("FAIL", "scope", f"hooks stay silent here: {outside}",
                            f"touch {shlex.quote(str(project / '.supervise-primary'))}, or set "
                            "scope = \"any\" in the config"))
    from ..session._off import off_reason

    off = off_reason(project)
    if off:  # deliberate, so not a failure; but a user asking "why no digest?" reads it here
        checks.append(Check("warn", "off", f"watchkeeper is off: {off}; every hook stays "
                            "quiet apart from one line saying so"))
    return checks, config


def _stage_checks(config: Any, project: Path) -> list[Check]:
    from ..config._builtins import builtin_argv
    from .._errors import ConfigError

    checks = []
    for stage in config.stages:
        subject = f"stage {stage.name}"
        if stage.builtin is not None:
            try:
                builtin_argv(stage.builtin)
            except ConfigError as err:
                checks.append(Check("FAIL", subject, str(err), f"correct 'builtin' of stage '{stage.name}' in {config.source}"))
                continue
            checks.append(Check("ok", subject, f"built-in '{stage.builtin}' found"))
            if stage.builtin == "memory":
                checks += _memory_store_checks(project, str(stage.options.get("dir") or ".remember"))
            continue
        program = "/bin/sh" if stage.shell else stage.run[0]
        base = project / stage.cwd if stage.cwd else project
        if "/" in program:
            path = Path(program) if Path(program).is_absolute() else base / program
            found = str(path) if path.is_file() and os.access(path, os.X_OK) else None
        else:
            found = shutil.which(program, path=stage.env.get("PATH", os.environ.get("PATH")))
        if found:
            checks.append(Check("ok", subject, f"program {program} found ({found})"))
        else:
            checks.append(Check("FAIL", subject, f"program {program!r} not found or not executable",
                                f"install it, or correct 'run' of stage '{stage.name}' in {config.source}"))
    return checks


def _memory_store_checks(project: Path, folder: str) -> list[Check]:
    """Is the memory store (the ``memory`` stage's ``dir``) kept out of git? Its tracked files
    are refused by the stage (planted memory is prompt injection: docs/stages/memory.md), so a
    store that is neither ignored nor tracked is one ``git add -A`` away from vanishing from
    the digest. Nothing when the store does not exist or lies outside the project."""
    # as the stage reads it (stages/memory common.resolve_path): "~" expanded, then relative
    # to the project; "~/notes" with no home stays relative, as there
    from .._git import untrack_fix
    from .._home import home_dir

    home = home_dir()
    if folder == "~" or folder.startswith("~/"):
        if home is None:  # the stage then reads nothing there either
            return []
        folder = home + folder[1:]
    store = Path(os.path.expanduser(folder))
    store = store if store.is_absolute() else project / store
    if not os.path.lexists(store):
        return []
    try:
        rel = store.resolve().relative_to(project.resolve())
    except ValueError:  # outside the project: not git's business here
        return []
    except (OSError, RuntimeError):  # a symbolic-link loop (.remember -> .remember)
        return [Check("warn", "memory store", f"{store} cannot be resolved (a symbolic-link "
                      "loop?): the memory stage reads nothing there",
                      f"remove or correct the link {store}")]
    if not rel.parts:  # the project itself: nothing to ignore
        return []
    name = f"{rel.as_posix()}/"  # project-relative, whatever form "dir" was given in
    env = {k: v for k, v in os.environ.items() if k != "GIT_LITERAL_PATHSPECS"}
    try:  # ":(literal)": "mem*" is that folder, never a glob matching mem1/
        tracked = subprocess.run(["git", "-C", str(project), "ls-files", "-z", "--",
                                  f":(literal){rel.as_posix()}"],
                                 capture_output=True, timeout=10, stdin=subprocess.DEVNULL, env=env)
        ignored = subprocess.run(["git", "-C", str(project), "check-ignore", "-q", "--", name],
                                 capture_output=True, timeout=10, stdin=subprocess.DEVNULL,
                                 env=env).returncode
    except (OSError, subprocess.TimeoutExpired):
        return []
    from .._git import explain

    refused = explain("git ls-files", tracked.returncode, tracked.stderr)
    if refused:  # the stage then refuses every memory file inside the project
        return [Check("FAIL", "memory store", f"{refused[0]}: the memory stage refuses the "
                      f"files in {name}", refused[1] or "make git work in this checkout")]
    if tracked.returncode == 0 and tracked.stdout:
        count = tracked.stdout.count(b"\0")
        return [Check("FAIL", "memory store", f"{count} file(s) in {name} are tracked by git, and "
                      "the memory stage refuses tracked memory (not injected)",
                      untrack_fix(rel.as_posix()))]
    if ignored == 1:
        return [Check("warn", "memory store", f"{name} is not git-ignored: a `git add -A` would "
                      "commit it, and the memory stage refuses tracked memory; add "
                      f"/{name} to .gitignore or .git/info/exclude")]
    if ignored == 0:
        return [Check("ok", "memory store", f"{name} is git-ignored")]
    return []


def _package_checks() -> list[Check]:
    """The import-name clash: supervisord is published as ``supervisor`` on PyPI, the same
    import name as watchkeeper; installed into the same environment it overwrites
    ``supervisor/__init__.py`` (then ``from supervisor import run_digest`` fails)."""
    import importlib.metadata

    import supervisor

    fix = ("install watchkeeper in an environment of its own (`pipx install` or `uv tool install`), "
           "or `pip uninstall supervisor` and reinstall watchkeeper")
    checks = []
    try:
        clash = importlib.metadata.distribution("supervisor")
    except importlib.metadata.PackageNotFoundError:
        clash = None
    if clash is not None:
        checks.append(Check("FAIL", "package", f"supervisord ({clash.metadata['Name']} "
                            f"{clash.version}) is installed in this environment and shares the "
                            "import name 'supervisor' with watchkeeper", fix))
    if "run_digest" not in getattr(supervisor, "__all__", ()):
        where = getattr(supervisor, "__file__", "?")
        checks.append(Check("FAIL", "package", f"{where} is not watchkeeper's (another package "
                            "named 'supervisor' overwrote it): `from supervisor import run_digest` "
                            "fails", fix))
    if not checks:
        checks.append(Check("ok", "package", "the import name 'supervisor' is watchkeeper's alone"))
    return checks


def _state_checks(project: Path) -> list[Check]:
    from ..config._context import state_dir_for

    state = Path(state_dir_for(project))
    checks = []
    if state.is_symlink():
        return [Check("FAIL", "state dir", f"{state} is a symlink",
                      f"remove the symlink (`rm {shlex.quote(str(state))}`); it is recreated")]
    from .._errors import StateError
    from ..state._statedir import StateDir

    try:  # through the state door: a probe file written and removed, no link followed
        sd = StateDir.open_existing(state)
        if sd is None:  # created by the first digest; doctor changes nothing
            parent = next((p for p in state.parents if p.exists()), Path("/"))
            if not os.access(parent, os.W_OK):
                raise StateError(f"{parent} is not writable, so {state} cannot be created")
            checks.append(Check("ok", "state dir", f"{parent} is writable; {state.name}/ will be "
                                "created by the first digest"))
        else:
            with sd:
                probe = f".doctor-{os.getpid()}"
                sd.write(probe, b"")
                sd.remove(probe)
            checks.append(Check("ok", "state dir", f"{state} is writable"))
    except StateError as err:
        checks.append(Check("FAIL", "state dir", f"{state} is not writable ({err})",
                            "make it writable by this user, or set SUPERVISE_STATE_DIR"))
    checks += _lock_checks(state)
    try:
        inside = state.resolve().is_relative_to(project.resolve())
        rc = subprocess.run(["git", "-C", str(project), "check-ignore", "-q", str(state) + "/"],
                            capture_output=True, timeout=10, stdin=subprocess.DEVNULL).returncode
    except (OSError, subprocess.TimeoutExpired):
        return checks
    if inside and rc == 1:
        checks.append(Check("FAIL", "state dir", f"{state.name}/ is not git-ignored",
                            "add /.supervise/ to .git/info/exclude (`supervise install` does)"))
    elif inside and rc == 0:
        checks.append(Check("ok", "state dir", f"{state.name}/ is git-ignored"))
    return checks


def _lock_checks(state: Path) -> list[Check]:
    """The lock as the hook judges it (:func:`supervisor.session._lock.judge_lock`, the one
    judgement ``status`` shows too); a record set aside as corrupt (a time in the future
    included) is named."""
    from .._errors import StateError
    from .._sanitize import one_line
    from ..session._lock import LOCK_FILE, LockRecord, judge_lock, read_record
    from ..state._statedir import take_notices
    from .status import lock_words

    try:
        lock = read_record(state / LOCK_FILE, LockRecord)
    except StateError:
        return []  # named by the state dir check
    checks = [Check("warn", "lock", one_line(line.removeprefix("[supervise] ")) + " (the next "
                    "start writes a fresh lock)") for line in take_notices()]
    if lock is None:
        return checks or [Check("ok", "lock", "free")]
    judged = judge_lock(lock)
    return [*checks, Check("warn" if judged.verdict == "unseen" else "ok", "lock",
                           f"{one_line(lock.harness)} pid {lock.pid}: "
                           f"{lock_words(judged.verdict, judged.reason)}")]


def _command_check(adapter: Adapter, command: str, project: Path) -> Check:
    subject = f"{adapter.name}"
    try:
        argv = shlex.split(command)
    except ValueError as err:
        return Check("FAIL", subject, f"registered command cannot be parsed ({err})",
                     f"supervise install {adapter.name}")
    env = {**os.environ, **({adapter.project_dir_env: str(project)} if adapter.project_dir_env else {})}
    program = os.path.expandvars(argv[0]) if argv else ""
    if adapter.project_dir_env:
        program = program.replace(f"${adapter.project_dir_env}", str(project))
    if not os.path.isabs(program):
        return Check("FAIL", subject, f"registered command starts with {program!r}, which depends on PATH",
                     f"supervise install {adapter.name} (registers an absolute interpreter)")
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        return Check("FAIL", subject, f"registered program {program} is missing or not executable",
                     f"supervise install {adapter.name} (from the environment watchkeeper is installed in)")
    if "-m" in argv and "supervisor" in argv:
        flags = argv[1:argv.index("-m")]
        found = _hook_import(program, flags, env, project)
        if isinstance(found, Check):
            return found._replace(subject=subject, fix=f"supervise install {adapter.name} {found.fix}".strip())
        isolated = "-I" in flags
        if not _is_watchkeeper(found):
            clean = found if isolated else _hook_import(program, ["-I"], env, project)
            fix = (f"supervise install {adapter.name} (rewrites it isolated, -I)"
                   if not isolated and isinstance(clean, str) and _is_watchkeeper(clean)
                   else "take the other package off the hook's path, or install watchkeeper in "
                   "an environment of its own (`pipx install`)")
            return Check("FAIL", subject, f"the hook would import a foreign 'supervisor' package "
                         f"(supervisord's import name) from {found}, not watchkeeper", fix)
        if not isolated:
            return Check("warn", subject, "registered before isolated mode (no -I): a "
                         "PYTHONPATH, PYTHONHOME, PYTHONSTARTUP or user site-packages of the "
                         "harness can shadow the package or break the hook; `supervise install "
                         f"{adapter.name}` rewrites it with -I")
    return Check("ok", subject, f"hook command works without PATH ({program})")


_IMPORT_PROBE = ("import supervisor, sys; sys.stdout.write(str(getattr(supervisor, '__file__', '') "
                 "or '') + '\\n'); sys.stdout.flush(); import supervisor.commands.hook")
"""What the registered interpreter imports with the registration's own flags: the first line
is the file of the ``supervisor`` package it finds, then the hook's module must import."""


def _hook_import(program: str, flags: list[str], env: dict[str, str],
                 project: Path) -> str | Check:
    """The file of the ``supervisor`` package ``program`` imports with ``flags`` and ``env``
    from ``project`` (the hook's own path), or a FAIL :class:`Check` (subject and fix filled
    in by the caller) when it cannot import the hook."""
    try:
        probe = subprocess.run([program, *flags, "-c", _IMPORT_PROBE], capture_output=True,
                               timeout=30, stdin=subprocess.DEVNULL, env=env, cwd=project)
    except (OSError, subprocess.TimeoutExpired) as err:
        return Check("FAIL", "", f"{program} did not run ({err})", "")
    first = probe.stdout.decode("utf-8", "replace").partition("\n")[0].strip()
    if probe.returncode != 0 and not (first and not _is_watchkeeper(first)):
        tail = (probe.stderr.decode("utf-8", "replace").strip().splitlines() or ["?"])[-1]
        return Check("FAIL", "", f"{program} cannot import watchkeeper ({tail})",
                     "from the environment watchkeeper is installed in")
    return first


def _is_watchkeeper(init_file: str) -> bool:
    """Whether ``init_file`` (a ``supervisor/__init__.py``) is watchkeeper's: its folder holds
    the hook's fast path and verb modules, which supervisord's never does."""
    folder = os.path.dirname(init_file)
    return bool(init_file) and all(os.path.isfile(os.path.join(folder, *part)) for part in
                                   (("hook-fast.sh",), ("commands", "hook.py")))


def recorded_timeout(command: str) -> float | None:
    """The ``--registered-timeout`` seconds ``install`` recorded in a hook command, or None."""
    import shlex

    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    for i, item in enumerate(argv):
        value = argv[i + 1] if item == "--registered-timeout" and i + 1 < len(argv) else (
            item.partition("=")[2] if item.startswith("--registered-timeout=") else None)
        if value is not None:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def _install_fix(adapter: Adapter, scope: str) -> str:
    """The install command that rewrites a registration at ``scope``: a user-scope one is
    fixed at user scope (``supervise install NAME`` would add a second, project registration)."""
    return f"supervise install {adapter.name}" + (" --scope user" if scope == "user" else "")


def _opt_in_check(adapter: Adapter, command: str, project: Path, start: Path | None,
                  what: str = "the user-scope registration", fix: str = "") -> Check:
    """Whether a user-scope registration (``what``: a settings file's, or the Gemini
    extension's) serves this project (its ``--opt-in``); ``fix``: how to get one that carries
    it (default: the user-scope install again)."""
    from ..session._gates import OPT_IN_FLAG, opt_in_silence

    if OPT_IN_FLAG not in command.split():
        return Check("warn", adapter.name, f"{what} runs in every repository "
                     "you open (each gets a .supervise/ folder), not only in projects that opted in",
                     fix or f"supervise install {adapter.name} --scope user (adds --opt-in)")
    why = opt_in_silence(adapter.name, project, start or project)
    if not why:
        return Check("ok", adapter.name, f"{what} serves this project and "
                     "every subdirectory session of it (it opted in)")
    if why.startswith("the project's own"):
        return Check("ok", adapter.name, f"{what} stays silent here: {why}")
    return Check("warn", adapter.name, f"{what} stays silent here: {why}; "
                 f"to opt in: `supervise config --default > {project / 'supervise.toml'}` (or add a "
                 "[tool.supervise] table to pyproject.toml)")


def _recorded_check(adapter: Adapter, handler: dict[str, Any], scope: str = "project") -> Check:
    """The timeout in the settings file against what ``install`` recorded in the command."""
    recorded = recorded_timeout(str(handler.get("command", "")))
    raw = handler.get("timeout")
    seconds = (adapter.timeout_seconds(raw) if isinstance(raw, (int, float))
               and not isinstance(raw, bool) else adapter.default_timeout)
    if recorded is None:
        return Check("warn", adapter.name, "the registration does not record its timeout, so the "
                     f"hook cannot clamp its budget to it; re-run `supervise install {adapter.name}`")
    if seconds is None or abs(seconds - recorded) > 0.5:
        shown = "the harness default" if raw is None else f"{seconds:g}s"
        return Check("FAIL", adapter.name, f"the registered timeout is {shown} but install recorded "
                     f"{recorded:g}s: the hook budgets for {recorded:g}s and the harness may kill "
                     "it first", _install_fix(adapter, scope))
    return Check("ok", adapter.name, f"registered timeout {recorded:g}s matches what install recorded")


def _timeout_check(adapter: Adapter, handler: dict[str, Any], budget: float,
                   scope: str = "project") -> Check:
    raw = handler.get("timeout")
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        seconds: float | None = adapter.timeout_seconds(raw)
        what = f"timeout {seconds:g}s"
    else:
        seconds, what = adapter.default_timeout, "no timeout registered (harness default)"
        if seconds is None:
            return Check("warn", adapter.name, f"{what}; the harness's default is not documented")
    assert seconds is not None
    if seconds >= budget + MIN_HEADROOM:
        return Check("ok", adapter.name, f"{what} is above the budget {budget:g}s")
    if scope == "user" and recorded_timeout(str(handler.get("command", ""))) is not None:
        # one registration for many projects: the hook clamps this project's budget to it
        return Check("warn", adapter.name, f"{what} (user scope) is not above this project's "
                     f"budget {budget:g}s + {MIN_HEADROOM:g}s: the hook clamps the budget to fit",
                     f"{_install_fix(adapter, scope)} run here (registers this budget + 60s), or "
                     "lower 'budget'")
    return Check("FAIL", adapter.name, f"{what} is not above the budget {budget:g}s + {MIN_HEADROOM:g}s: "
                 "the harness kills the hook before the banner", f"supervise install {adapter.name} "
                 f"(registers budget + 60s), or lower 'budget'")


_CODEX_EVENTS = {"SessionStart": "session_start", "UserPromptSubmit": "user_prompt_submit",
                 "PostToolUse": "post_tool_use", "PreToolUse": "pre_tool_use", "Stop": "stop",
                 "PreCompact": "pre_compact", "PostCompact": "post_compact",
                 "PermissionRequest": "permission_request"}
_CODEX_MATCHER_EVENTS = frozenset({"permission_request", "post_compact", "post_tool_use",
                                   "pre_compact", "pre_tool_use", "session_start"})


def codex_hook_hash(event: str, matcher: str | None, handler: dict[str, Any]) -> str:
    """The trust hash Codex stores for one command handler (``trusted_hash`` in its
    ``config.toml``): ``sha256:`` and the hex SHA-256 of the handler's normalized identity
    (event name in snake case, the group's matcher for events that use one, the command, its
    timeout in seconds (default 600, at least 1), ``async = false``, its status message) as
    compact JSON with sorted keys. Source: Codex's normalized hook identity
    (openai/codex ``codex-rs/hooks/src/engine/discovery.rs``, ``version_for_toml``).
    """
    import hashlib
    import json

    raw = handler.get("timeout")
    timeout = max(int(raw), 1) if isinstance(raw, int) and not isinstance(raw, bool) else 600
    normalized: dict[str, Any] = {"type": "command", "command": str(handler.get("command", "")),
                                  "timeout": timeout, "async": False}
    if isinstance(handler.get("statusMessage"), str):
        normalized["statusMessage"] = handler["statusMessage"]
    identity: dict[str, Any] = {"event_name": event, "hooks": [normalized]}
    if event in _CODEX_MATCHER_EVENTS and isinstance(matcher, str):
        identity["matcher"] = matcher
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _home_path() -> Path | None:
    from .._home import home_dir

    home = home_dir()
    return None if home is None else Path(home)


def _codex_trust(path: Path, project: Path, data: dict[str, Any] | None,
                 project_scope: bool) -> list[Check]:
    from .._harnesses import BY_NAME
    from .._home import home_dir

    folder = BY_NAME["codex"].user_folder(home_dir())
    if folder is None:  # never ./~/.codex in the cwd
        return [Check("warn", "codex", "Codex's trust and hook state not checked: no home "
                      "directory (HOME unset, empty or relative) and no CODEX_HOME",
                      "set HOME")]
    conf_path = Path(folder, "config.toml")
    from .._errors import ConfigError
    from ..state._fsutil import read_small_file

    try:  # never blocking on a FIFO, capped (the guarded read of a small user file)
        raw = read_small_file(conf_path, 1 << 20, what="a Codex config file", missing_ok=True)
        conf = tomllib.loads(raw.decode("utf-8")) if raw else {}
    except (ConfigError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        conf = {}
    checks = []
    if project_scope:  # by scope, not path: the project may be the home folder itself
        level = conf.get("projects", {}).get(str(project), {}).get("trust_level")
        if level != "trusted":
            checks.append(Check("FAIL", "codex", f"project {project} is not trusted in {conf_path}, "
                                "so Codex does not load .codex/hooks.json at all",
                                f"answer 'trust' when `codex` asks in {project}, or add "
                                f"[projects.\"{project}\"] trust_level = \"trusted\" to {conf_path}"))
    states = conf.get("hooks", {}).get("state", {})
    states = states if isinstance(states, dict) else {}
    untrusted, stale = [], []
    hooks = (data or {}).get("hooks", {})
    for event, groups in (hooks.items() if isinstance(hooks, dict) else ()):
        snake = _CODEX_EVENTS.get(event)
        if snake is None or not isinstance(groups, list):
            continue
        for gi, group in enumerate(groups):
            handlers = group.get("hooks", []) if isinstance(group, dict) else []
            for hi, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if not (isinstance(handler, dict) and "supervisor" in str(handler.get("command", ""))
                        and " hook " in f" {handler.get('command', '')} "):
                    continue
                key = f"{path}:{snake}:{gi}:{hi}"
                state = states.get(key) or states.get(f"file:{key}")
                trusted = state.get("trusted_hash") if isinstance(state, dict) else None
                if not trusted:
                    untrusted.append(event)
                elif trusted != codex_hook_hash(snake, group.get("matcher"), handler):
                    stale.append(event)
    fix = f"run `codex` in {project}, open /hooks and trust the watchkeeper hooks"
    if untrusted:
        checks.append(Check("FAIL", "codex", f"hooks not trusted yet ({', '.join(dict.fromkeys(untrusted))}): "
                            "Codex does not run untrusted hooks", fix))
    if stale:
        checks.append(Check("FAIL", "codex", f"the trust of {', '.join(dict.fromkeys(stale))} is stale: "
                            "the registration changed after it was trusted, so Codex does not run it",
                            fix + " again"))
    if not untrusted and not stale:
        checks.append(Check("ok", "codex", "the hooks are trusted in " + str(conf_path)))
    return checks


_CWD_SETTINGS = {"claude": ("Claude Code 2.1.197", ".claude/"), "gemini": ("Gemini CLI 0.61.0", ".gemini/")}
"""Harnesses that read project settings from the session's working directory only (observed:
a registration at the repository root did not fire for a session started in a subdirectory;
docs/harnesses/claude.md, gemini.md)."""


def _subdir_check(adapter: Adapter, project: Path, start: Path, scopes: list[str]) -> list[Check]:
    """A ``warn`` when doctor runs in a subdirectory of the project and ``adapter`` reads its
    project settings from the working directory only while every registration (``scopes``:
    the scope of each) is the project's: a session started there gets no digest. Judged by
    scope, never by path: a project that is the home folder holds the user settings too."""
    if adapter.name not in _CWD_SETTINGS or "user" in scopes:
        return []
    who, folder = _CWD_SETTINGS[adapter.name]
    rel = os.path.relpath(start, project)
    return [Check("warn", adapter.name, f"a session started in {rel}/ gets no digest: {who} reads "
                  f"project settings from {folder} in its working directory only, not from "
                  f"{project}; for sessions in subdirectories: supervise install {adapter.name} "
                  "--scope user (it serves every subdirectory session of a project that opted "
                  "in, and this registration counts; it stays silent elsewhere)")]


def _plugin_checks(adapter: Adapter, plugins: list[tuple[Path, str, str]], project: Path,
                   home: Path, start: Path | None = None) -> list[Check]:
    """The checks of our harness plugin where a settings file enables it (``plugins``: the
    file, its scope and the key): is it in the harness's cache (else it does not load), and is
    ``supervise-hook``, which its hooks run, on ``PATH``. The Gemini extension (user level,
    loaded in every project) serves only projects that opted in (its hooks carry
    ``--opt-in``): whether it serves this one (``start``: the folder doctor was asked about)."""
    checks = []
    for path, scope, key in plugins:
        if key.startswith("extension "):
            checks.append(Check("ok", adapter.name, f"{key} installed in {path} (user level)"))
            checks.append(_opt_in_check(
                adapter, _plugins.extension_session_command(adapter, path), project, start,
                f"the {key}", f"gemini extensions uninstall {_plugins.plugin_name(adapter)} && "
                f"supervise install {adapter.name} --plugin (links this version's extension)"))
            continue
        from .._errors import ConfigError

        try:
            cached = _plugins.cached(adapter, home, project, scope)
        except ConfigError as err:  # a FIFO, huge or deep plugin list: named, never read
            checks.append(Check("warn", adapter.name, f"plugin {key} enabled in {path}; whether "
                                f"{adapter.title}'s cache has it is unknown: {err}"))
            continue
        if cached:
            checks.append(Check("ok", adapter.name, f"plugin {key} enabled in {path} and "
                                f"installed in {adapter.title}'s cache"))
        else:
            checks.append(Check("FAIL", adapter.name, f"plugin {key} enabled in {path} but not "
                                f"installed in {adapter.title}'s cache: it does not load",
                                f"supervise install {adapter.name} --plugin --scope {scope}"))
    if plugins:
        found = shutil.which("supervise-hook")
        if found:
            checks.append(Check("ok", adapter.name, f"the plugin's hooks run {found}"))
        else:
            checks.append(Check("FAIL", adapter.name, "supervise-hook, which the plugin's hooks "
                                "run, is not on PATH", "install watchkeeper with `pipx install` "
                                "or `uv tool install` (they put supervise-hook on PATH)"))
    return checks


def _bridge_checks(name: str, project: Path, budget: float, named: bool,
                   start: Path | None = None) -> list[Check]:
    """A bridge harness's lines: the placed bridge (:func:`supervisor.bridges._install.check`)
    and the extension package of ``plugins/`` named in its configuration
    (:func:`supervisor.commands._plugins.package_uses`): either one is a registration, both
    would deliver twice. ``start``: the folder doctor was asked about when it is a
    subdirectory of ``project`` (else None)."""
    from ..bridges._install import check as bridge_check, get as bridge

    packages = _plugins.package_uses(name, project, _home_path())
    placed = [Check(status, name, text, fix) for status, text, fix in
              bridge_check(bridge(name), project, _home_path(), budget, named and not packages,
                           start)]
    checks = list(placed)
    for path, source in packages:
        checks.append(Check("ok", name, f"the {bridge(name).title} package {source} is loaded "
                            f"from {path}"))
    if packages:
        found = shutil.which("supervise-hook")
        checks.append(Check("ok", name, f"the package runs {found}") if found else Check(
            "FAIL", name, "supervise-hook, which the package runs, is not on PATH",
            "install watchkeeper with `pipx install` or `uv tool install` (they put "
            "supervise-hook on PATH)"))
        from ..adapters._extension import PROJECT_PACKAGE_FILES
        from ..bridges._install import opts_in

        # Copies of the bridge in one load settle which serves (core.mjs claimLoad). The
        # copies that ask with --opt-in (the packages at user scope, a user-scope bridge
        # placed opt-in) serve a project that opted in, and a project-level copy (a package
        # in the project's configuration, a project bridge) is that opt-in: one of each kind
        # delivers once. Two of one kind are a double, as two registrations of a hook are.
        home = _home_path()
        serving: list[tuple[str, str]] = []
        yielding: list[tuple[str, str]] = []
        mine = {project / rel for rel in PROJECT_PACKAGE_FILES[name]}
        for path, source in packages:
            (serving if path in mine else yielding).append(
                (f"the package {source} ({path})", f"remove {source} from {path}"))
        for scope in ("project", "user") if home is not None else ("project",):
            entry, _, settings = bridge(name).files(scope, project, home or project)
            if any(c.status == "ok" and c.text.endswith(f" bridge placed in {entry}")
                   for c in placed):
                (yielding if scope == "user" and opts_in(settings) else serving).append(
                    (str(entry), f"supervise uninstall {name} --scope {scope}"))
        said = any(c.text.startswith("watchkeeper is registered") for c in placed)
        for places in () if said else (serving, yielding):  # (the placed pair: said once)
            double = _settings.double_registration(name, bridge(name).title, places,
                                                   stands_down=True)
            if double:  # two copies of one kind: both load, one serves
                status, text, fix = double
                checks.append(Check(status, name, text, fix))
                break
    return checks


def _mcp_checks(project: Path, named: bool) -> list[Check]:
    """The ``supervise mcp`` registrations of every MCP client (``install mcp --for CLIENT``):
    each entry runs ``supervise mcp --for CLIENT``, ``supervise`` is on ``PATH`` and has the
    SDK (``watchkeeper[mcp]``); where the client's harness has our hook too, the server's
    instructions stand down (the digest arrives once). ``named``: ``doctor mcp``, so no
    registration at all is a failure."""
    import importlib.util

    from . import _mcp_clients
    from .mcp import command_install_hint, sdk_install_hint, standdown_reason

    home = _home_path()
    checks: list[Check] = []
    found = False
    for client in _mcp_clients.CLIENTS.values():
        for scope, _ in client.mcp_files:
            if scope == "user" and home is None:
                continue
            path = _mcp_clients.path(client, scope, project, home or project)
            subject = f"mcp ({client.name})"
            try:
                data, _raw = _mcp_clients.read(client, path)
            except Exception as err:  # ConfigError: one line
                checks.append(Check("FAIL", subject, str(err), "fix the file (install refuses to edit it)"))
                continue
            entry = _mcp_clients.registered(client, data)
            if entry is None:
                continue
            found = True
            if not _mcp_clients.entry_ok(client, entry):
                checks.append(Check("FAIL", subject, f"the {_mcp_clients.NAME} server in {path} does "
                                    f"not run `supervise mcp --for {client.name}`"
                                    + (f" with {client.mcp_trust} = true" if client.mcp_trust else ""),
                                    f"supervise install mcp --for {client.name} --scope {scope}"))
                continue
            checks.append(Check("ok", subject, f"server registered in {path}"))
            if not _mcp_clients.wait_ok(client, data):
                checks.append(Check("WARN", subject, f"{client.mcp_wait} in {path} is below "
                                    f"{_mcp_clients.wait_ms()} ms: {client.label} may send its first "
                                    "request before the server answers (no instructions, no tools)",
                                    f"set {client.mcp_wait} = {_mcp_clients.wait_ms()} there"))
            reason = standdown_reason(client.name, project)
            if reason:
                checks.append(Check("ok", subject, f"{reason} delivers the digest; the server's "
                                    "instructions stand down to one line (the digest arrives once)"))
    if not found:
        return [Check("FAIL", "mcp", "no supervise mcp registration found",
                      "supervise install mcp --for CLIENT")] if named else []
    program = shutil.which(_mcp_clients.COMMAND)
    if program is None:
        checks.append(Check("FAIL", "mcp", f"{_mcp_clients.COMMAND}, which the clients run, is not "
                            "on PATH", command_install_hint()))
    elif importlib.util.find_spec("mcp") is None:
        checks.append(Check("FAIL", "mcp", "the MCP SDK is not installed",
                            sdk_install_hint()))
    return checks


def _harness_checks(adapter: Adapter, project: Path, budget: float, named: bool,
                    start: Path | None = None) -> list[Check]:
    """The checks of one hook harness; ``start``: the folder doctor was asked about when it is
    a subdirectory of ``project`` (else None)."""
    found: list[tuple[Path, dict[str, list[dict[str, Any]]], dict[str, Any] | None]] = []
    plugins: list[tuple[Path, str, str]] = []  # (settings file, scope, plugin key)
    scope_of: dict[Path, str] = {}
    checks: list[Check] = []
    from .._home import home_dir

    home = home_dir()
    for scope in adapter.scopes:
        if home is None and scope == "user":  # never ./~/.claude/... in the working directory
            continue  # (one "home" warn line in main)
        path = adapter.settings_path(scope, project, Path(home or project))
        refused = _settings.refuse_links([path], project, Path(home or project))
        if refused:  # a hostile clone's link to the user's own file: never read as ours
            checks.append(Check("FAIL", adapter.name, refused[0].split(";")[0],
                                "replace the link with a regular file (install refuses to "
                                "write through it)"))
            continue
        try:
            data = _settings.read_registration(adapter, path)
        except Exception as err:  # ConfigError: one line
            checks.append(Check("FAIL", adapter.name, str(err), "fix the JSON (install refuses to edit it)"))
            continue
        regs = _settings.registered(data, adapter)
        if regs:
            found.append((path, regs, data))
            scope_of[path] = scope
        plugins += [(path, scope, key) for key in _plugins.enabled(data, adapter)]
    extension = _plugins.extension_dir(adapter, Path(home)) if home else None
    gone = _plugins.stale_link(extension) if extension is not None else ""
    if gone:  # linked to a folder that is no extension now: Gemini loads nothing from it
        checks.append(Check("FAIL", adapter.name, f"the extension {_plugins.plugin_name(adapter)}"
                            f" in {extension} is linked to {gone}, which holds no "
                            "gemini-extension.json (moved or removed): Gemini loads nothing "
                            "from it", f"supervise install {adapter.name} --plugin"))
    elif extension is not None:  # Gemini: user level, loaded in every folder
        plugins.append((extension, "user", f"extension {_plugins.plugin_name(adapter)}"))
    checks += _plugin_checks(adapter, plugins, project, Path(home or project), start)
    if plugins and not found:
        return checks
    if not found:
        if named or checks:
            checks.append(Check("FAIL", adapter.name, "no watchkeeper registration found",
                                f"supervise install {adapter.name}"))
        return checks
    from ..session._gates import OPT_IN_FLAG

    # A registration carrying --opt-in (user scope, the Gemini extension) stays silent where
    # the project's own one serves, but two of them both serve an opted-in project's sessions
    # that no project registration reaches (a subdirectory): each kind is judged apart.
    serving: list[tuple[str, str]] = []
    yielding: list[tuple[str, str]] = []
    for p, regs, _ in found:
        (serving if _settings.serving(regs, adapter) else yielding).append(
            (str(p), f"supervise uninstall {adapter.name} --scope {scope_of[p]}"))
    for p, _, key in plugins:
        if key.startswith("extension ") and OPT_IN_FLAG in (
                _plugins.extension_session_command(adapter, p).split()):
            yielding.insert(0, (f"the {key} ({p})", ""))  # kept: the settings one goes
            continue
        serving.append((f"the plugin {key} ({p})", f"supervise install {adapter.name} --plugin "
                        "(keeps the plugin alone)"))
    double = (_settings.double_registration(adapter.name, adapter.title, serving)
              or _settings.double_registration(adapter.name, adapter.title, yielding))
    if double:  # e.g. .claude/settings.json and ~/.claude/settings.json, or a plugin beside
        status, text, fix = double  # settings hooks: each runs, so keep one
        checks.append(Check(status, adapter.name, text, fix))
    for path, regs, data in found:
        session = regs.get(adapter.session_event, [])
        if not session:
            checks.append(Check("FAIL", adapter.name, f"{path}: no {adapter.session_event} hook of ours",
                                f"supervise install {adapter.name}"))
            continue
        checks.append(Check("ok", adapter.name, f"{adapter.session_event} registered in {path}"))
        checks.append(_command_check(adapter, str(session[0].get("command", "")), project))
        if adapter.start_armed:  # the session event only arms: the prompt hook runs the digest
            checks.append(Check(
                "ok", adapter.name, f"{adapter.session_event} only arms the start (its output "
                f"is dropped); {adapter.prompt_event} delivers it, its budget clamped to the "
                f"harness's {adapter.default_timeout or 0:g}s hook timeout"))
        else:
            checks.append(_timeout_check(adapter, session[0], budget, scope_of[path]))
            if checks[-1].status != "FAIL":  # one fix (install) for one wrong timeout
                checks.append(_recorded_check(adapter, session[0], scope_of[path]))
        if scope_of[path] == "user":
            checks.append(_opt_in_check(adapter, str(session[0].get("command", "")), project, start))
        for event, what in ((adapter.prompt_event, "per-prompt (deferred results)"),
                            (adapter.post_tool_event, "post-tool (nested instructions, rules on reads)"),
                            (adapter.compact_event, "pre-compaction"),
                            (adapter.resume_event, "resumed-session")):
            if event and event not in regs:
                checks.append(Check("FAIL", adapter.name, f"{what} hook {event} missing in {path}",
                                    _install_fix(adapter, scope_of[path])))
            elif event:
                checks.append(Check("ok", adapter.name, f"{what} hook {event} registered"))
        # what the real CLI never ran is a risk of this setup: the harness's page says why
        checks += [Check("warn", adapter.name, f"not proven with the real CLI: {line}")
                   for line in adapter.unproven]
        checks += [Check("warn", adapter.name, f"cannot: {line}") for line in adapter.limits]
        if adapter.name == "codex":
            checks += _codex_trust(path, project, data, scope_of[path] != "user")
        if adapter.name == "gemini" and scope_of[path] != "user":
            from ._gemini_trust import gemini_trust

            status, text, fix = gemini_trust(project)
            checks.append(Check(status, adapter.name, text, fix))
    if start is not None:
        checks += _subdir_check(adapter, project, start, [scope_of[p] for p, _, _ in found])
    return checks  # the harness's general caveats are in docs/harnesses/, not warnings here


def main(argv: list[str]) -> int:
    """Run every check and print one line each; exit 1 if any failed."""
    p = VerbParser(prog="supervise doctor", description="check registrations, timeouts, "
                                "state dir and config")
    p.add_argument("harnesses", nargs="*", metavar="HARNESS", help=f"only these ({', '.join([*ADAPTERS, 'pi', 'opencode'])}, or mcp: the MCP server's registrations)")
    add_directory(p)
    args = p.parse_args(argv)
    from ..bridges._install import NAMES as BRIDGES

    unknown = [h for h in args.harnesses if h not in ADAPTERS and h not in BRIDGES and h != "mcp"]
    if unknown:
        print(f"supervise doctor: unknown harness {unknown[0]!r} (known: "
              f"{', '.join([*ADAPTERS, *BRIDGES])})",
              file=sys.stderr)
        return 2
    project = _settings.find_project_dir(args.directory or Path.cwd())
    checks, config = _config_checks(project)
    from ..config._schema import DEFAULT_BUDGET

    budget = config.budget if config is not None else DEFAULT_BUDGET
    checks += _package_checks()
    checks += _state_checks(project)
    if config is not None:
        checks += _stage_checks(config, project)
    names = args.harnesses or list(ADAPTERS)
    start = Path(os.path.realpath(args.directory or Path.cwd()))
    below = start if start != Path(os.path.realpath(project)) and start.is_relative_to(
        os.path.realpath(project)) else None
    harness_checks = [c for name in names if name in ADAPTERS
                      for c in _harness_checks(ADAPTERS[name], project, budget, bool(args.harnesses),
                                               below)]
    for name in (args.harnesses or BRIDGES):
        if name in BRIDGES:
            harness_checks += _bridge_checks(name, project, budget, bool(args.harnesses), below)
    if not args.harnesses or "mcp" in args.harnesses:
        harness_checks += _mcp_checks(project, "mcp" in args.harnesses)
    if _home_path() is None:
        harness_checks.insert(0, Check("warn", "home", "user-scope registrations not checked: no "
                                       "home directory (HOME unset, empty or relative)",
                                       "set HOME"))
    if not harness_checks:
        harness_checks = [Check("FAIL", "harness", "no watchkeeper registration found for any harness",
                                f"supervise install HARNESS ({', '.join([*ADAPTERS, 'pi', 'opencode'])})")]
    checks += harness_checks
    for check in checks:
        print(check.line())
    failed = sum(c.status == "FAIL" for c in checks)
    print(f"{failed} problem{'' if failed == 1 else 's'} found" if failed else "all checks passed")
    return EXIT_FAILURE if failed else EXIT_OK
