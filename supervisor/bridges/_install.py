"""Placing, removing and checking the extension bridges (Pi, OpenCode).

Pi and OpenCode have no hook command to register: they load extension files from a folder.
``supervise install pi|opencode`` copies three files there:

* the entry the harness discovers (Pi ``.pi/extensions/watchkeeper/index.ts``, OpenCode
  ``.opencode/plugins/watchkeeper.ts``), carrying :data:`MARK`;
* ``core.mjs``, the shared logic (generations, cap, delivery);
* ``watchkeeper.json`` beside ``core.mjs``: the absolute interpreter path (so nothing depends
  on ``PATH``) and the digest budget in seconds; at user scope also ``"opt_in": true`` (the
  bridge then serves only projects that opted in: :func:`settings_text`).

Uninstall removes only files carrying our mark (and ``core.mjs``/``watchkeeper.json`` in our
own folder). Every function here returns printable lines; errors are :class:`OSError`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from importlib import resources
from pathlib import Path

from .._harnesses import BRIDGES
from ..state._fsutil import atomic_write
from ..adapters._extension import CORE, MARK, Bridge


def packaged(relative: str) -> str:
    """Text of a packaged bridge file (``core.mjs``, ``pi/index.ts``)."""
    return resources.files("supervisor.bridges").joinpath(relative).read_text("utf-8")


def settings_text(python: str, budget: float, opt_in: bool = False) -> str:
    """The ``watchkeeper.json`` we write (interpreter path, budget in seconds; ``opt_in``
    for a user-scope bridge: it serves only projects that opted in, every subdirectory of
    one, as a user-scope hook registration does: ``core.mjs`` then passes ``--opt-in``), and
    the nudge line a failed generation delivers (``nudge``: ``supervisor/nudge.txt`` without
    its newline, :data:`supervisor.session._nudge.NUDGE_TEXT`; the placed ``core.mjs`` has no
    package beside it to read it from)."""
    from ..session._nudge import NUDGE_TEXT

    data: dict[str, object] = {"python": python, "budget": budget, "protocol": 1,
                               "nudge": NUDGE_TEXT.rstrip("\n"), "written_by": "supervise install"}
    if opt_in:
        data["opt_in"] = True
    return json.dumps(data, indent=2) + "\n"


def opts_in(settings: Path) -> bool:
    """The ``watchkeeper.json`` at ``settings`` says ``"opt_in": true`` (:func:`settings_text`)."""
    try:
        return json.loads(_read(settings) or "{}").get("opt_in") is True
    except (ValueError, AttributeError, RecursionError):
        return False


def _write(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` atomically (a temp file renamed in the real folder); False
    when it already held exactly that.

    Raises:
        ValueError: ``path`` is a symbolic link (nothing written).
        OSError: the folder cannot be created or written.
    """
    if _read(path) == text:
        return False
    if path.is_symlink():  # the caller checks the whole path first; never write through one
        from ..state._fsutil import link_refusal

        raise ValueError(link_refusal(path, os.readlink(path)))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode("utf-8"))
    return True


def install(bridge: Bridge, scope: str, project_dir: Path, home: Path, budget: float,
            python: str | None = None) -> str:
    """Place ``bridge``'s files; return one line saying what happened.

    Raises:
        OSError: a file could not be written.
        ValueError: the entry path holds a file that is not ours (left untouched).
    """
    entry, core, settings = bridge.files(scope, project_dir, home)
    if entry.exists() and MARK not in _read(entry):
        raise ValueError(f"{entry} exists and is not watchkeeper's; move it away first")
    if scope == "user":  # it serves many projects: a wait that fits at least the default budget
        from ..config._schema import DEFAULT_BUDGET

        budget = max(budget, DEFAULT_BUDGET)
    changed = [_write(entry, packaged(bridge.package_entry)),
               _write(core, packaged(CORE)),
               _write(settings, settings_text(python or sys.executable, budget,
                                              opt_in=scope == "user"))]
    where = _rel(entry, project_dir)
    if not any(changed):
        return f"{bridge.name}: already installed in {where} (unchanged)"
    return f"{bridge.name}: placed the {bridge.title} bridge in {where}"


def uninstall(bridge: Bridge, scope: str, project_dir: Path, home: Path) -> str:
    """Remove ``bridge``'s files (ours only); return one line. Raises OSError."""
    entry, core, settings = bridge.files(scope, project_dir, home)
    where = _rel(entry, project_dir)
    if not entry.exists() and not core.exists():
        return f"{bridge.name}: nothing to remove ({where} does not exist)"
    if entry.exists() and MARK not in _read(entry):
        return f"{bridge.name}: {where} is not watchkeeper's; left untouched"
    removed = 0
    for path in (entry, core, settings):
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    stop = {project_dir, home, Path(bridge.row.user_folder(str(home)))}
    for folder in sorted({core.parent, entry.parent}, key=lambda p: -len(p.parts)):
        while folder not in stop and folder != folder.parent:
            try:
                folder.rmdir()  # only when now empty: .pi/extensions/watchkeeper, .pi/extensions, .pi
            except OSError:
                break
            folder = folder.parent
    return f"{bridge.name}: removed {removed} watchkeeper bridge file(s) from {where}"


def _read(path: Path) -> str:
    """``path``'s text (at most 4 MiB), never blocking on a planted FIFO nor reading a device;
    ``""`` when absent, unreadable or not a regular file."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, 4 * 1024 * 1024).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _rel(path: Path, project_dir: Path) -> str:
    try:
        return str(path.relative_to(project_dir))
    except ValueError:
        return str(path)


def check(bridge: Bridge, project_dir: Path, home: Path | None, budget: float,
          named: bool, start: Path | None = None) -> list[tuple[str, str, str]]:
    """``doctor`` lines for ``bridge``: ``(status, text, fix)``, status ``ok``/``warn``/``FAIL``.
    ``home`` None (no home directory): the user scope is not checked.

    Checks, per scope with a placed entry: the entry and ``core.mjs`` are present and current,
    ``watchkeeper.json`` names an absolute interpreter that imports watchkeeper without
    ``PATH``, and its budget matches the config's; whether a user-scope bridge serves this
    project (``opt_in``; one without it serves every project: a warn, and a double beside the
    project's); ``start``, a subdirectory of the project doctor was asked about: a warn when
    only the project's extension is placed and the harness loads it from the working
    directory alone (Pi; not OpenCode: the row's ``project_upward``).
    """
    fix = f"supervise install {bridge.name}"
    out: list[tuple[str, str, str]] = []
    found = False
    placed: list[tuple[str, str]] = []
    scopes: set[str] = set()  # where an entry of ours is placed
    from ..state._fsutil import link_on_path, link_refusal

    roots = tuple(sorted({project_dir.absolute(), *([home.absolute()] if home else [])},
                         key=lambda p: -len(p.parts)))
    for scope in ("project", "user") if home is not None else ("project",):
        # (the project scope never reads ``home``)
        entry, core, settings = bridge.files(scope, project_dir, home or project_dir)
        link = next((hit for path in (entry, core, settings)
                     if (hit := link_on_path(path.absolute(), roots))), None)
        if link:  # a hostile clone's link: never read or refreshed through
            out.append(("FAIL", link_refusal(*link).split(";")[0],
                        "replace the link with a regular file (install refuses to write "
                        "through it)"))
            found = True
            continue
        if MARK not in _read(entry):  # (absent or unreadable: "", never an error)
            continue
        found = True
        scopes.add(scope)
        out.append(("ok", f"{bridge.title} bridge placed in {entry}", ""))
        if scope == "user" and opts_in(settings):  # it yields to the project's: no double
            from ..session._gates import opt_in_silence

            why = opt_in_silence(bridge.name, project_dir, start or project_dir)
            out.append(("ok", f"the user-scope bridge stays silent here: {why}" if why else
                        "the user-scope bridge serves this project (it opted in), in every "
                        "subdirectory", ""))
        else:
            placed.append((str(entry), f"supervise uninstall {bridge.name} --scope {scope}"))
            if scope == "user":
                out.append(("warn", f"{entry} serves every project, opted in or not (placed by "
                            "an older watchkeeper)", f"supervise install {bridge.name} --scope "
                            "user (places it opt-in)"))
        if not os.path.isfile(core):  # (a folder it cannot search: False, not EACCES)
            out.append(("FAIL", f"{core} is missing", fix))
            continue
        if (_read(core) != packaged(CORE) or _read(entry) != packaged(bridge.package_entry)
                or _written_nudge(settings) != _nudge_line()):
            out.append(("warn", f"{entry.parent} holds another watchkeeper version's bridge; "
                        f"`{fix}` refreshes it", ""))
        out += _settings_check(settings, budget, fix if scope == "project" else
                               f"{fix} --scope user", project_dir, bridge.title,
                               at_least=scope == "user")
    if not found and named:
        out.append(("FAIL", f"no watchkeeper bridge found for {bridge.title}", fix))
    if start is not None and scopes == {"project"} and not bridge.row.project_upward:
        rel = os.path.relpath(start, project_dir)
        out.append(("warn", f"a session started in {rel}/ gets no digest: {bridge.title} loads "
                    f"extensions from its working directory only, not from {project_dir}",
                    f"supervise install {bridge.name} --scope user (it serves every "
                    "subdirectory session of a project that opted in, and this extension "
                    "counts; it stays silent elsewhere)"))
    from ..adapters._settings import double_registration

    double = double_registration(bridge.name, bridge.title, placed, stands_down=True)
    if double:  # the project's and the user's extension: both load, both deliver
        out.append(double)
    return out  # the harness's general caveats are in docs/harnesses/, not warnings here


def _nudge_line() -> str:
    from ..session._nudge import NUDGE_TEXT

    return NUDGE_TEXT.rstrip("\n")


def _written_nudge(settings: Path) -> object:
    """The ``nudge`` a placed ``watchkeeper.json`` carries (None when unreadable or absent):
    another version's line means another version's bridge."""
    try:
        data = json.loads(_read(settings))
    except (ValueError, RecursionError):
        return None
    return data.get("nudge") if isinstance(data, dict) else None


def _settings_check(settings: Path, budget: float, fix: str, project_dir: Path,
                    title: str, at_least: bool = False) -> list[tuple[str, str, str]]:
    """The checks of a placed ``watchkeeper.json``; ``at_least`` (a user-scope bridge, which
    serves many projects): its budget may exceed this project's, never fall short of it."""
    try:
        data = json.loads(_read(settings))
        python = data["python"]
        written = float(data.get("budget", 0))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return [("FAIL", f"{settings} is missing or unreadable", fix)]
    if not isinstance(python, str) or not os.path.isabs(python):
        return [("FAIL", f"{settings}: interpreter {python!r} is not an absolute path "
                 "(it would depend on PATH)", fix)]
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return [("FAIL", f"{settings}: interpreter {python} is missing or not executable",
                 f"{fix} (from the environment watchkeeper is installed in)")]
    try:
        probe = subprocess.run([python, "-I", "-c", "import supervisor.commands.bridge"],
                               capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                               cwd=project_dir)
    except (OSError, subprocess.TimeoutExpired) as err:
        return [("FAIL", f"{python} did not run ({err})", fix)]
    if probe.returncode != 0:
        tail = (probe.stderr.decode("utf-8", "replace").strip().splitlines() or ["?"])[-1]
        return [("FAIL", f"{python} cannot import watchkeeper ({tail})", fix)]
    out = [("ok", f"bridge command works without PATH ({shlex.quote(python)} -m supervisor bridge)", "")]
    if written < budget or (written != budget and not at_least):
        out.append(("warn", f"{settings} says budget {written:g}s but the config says {budget:g}s: "
                    f"{title} waits on the written one; `{fix}` updates it", ""))
    return out


# ---------------------------------------------------------------- the verbs' door

NAMES: tuple[str, ...] = BRIDGES
"""Harness names served by a bridge (``supervise install pi``), not by a hook command: the
harness table's rows of kind ``bridge``."""


def get(name: str) -> Bridge:
    """The :class:`Bridge` for ``name`` (``supervisor.adapters.pi``/``opencode``). KeyError."""
    if name not in NAMES:
        raise KeyError(name)
    from importlib import import_module

    bridge: Bridge = import_module(f"supervisor.adapters.{name}").BRIDGE
    return bridge


def split(names: list[str]) -> tuple[list[str], list[str]]:
    """``(hook-command names, bridge names)`` from a verb's HARNESS arguments (``all``: both)."""
    bridged = list(NAMES) if "all" in names else [n for n in dict.fromkeys(names) if n in NAMES]
    return [n for n in names if n not in NAMES], bridged


def run_verb(verb: str, names: list[str], scope: str, project_dir: Path,
             budget: float = 120.0) -> bool:
    """``install`` or ``uninstall`` the bridges ``names``, printing one line each (errors on
    stderr); return True when one failed. ``budget`` (seconds, the project's digest budget)
    is written to ``watchkeeper.json`` on install."""
    failed = False
    for name in names:
        bridge = get(name)
        if scope not in ("project", "user"):  # `--scope local`: a settings file Claude has
            print(f"{name}: skipped: {bridge.title} has no {scope} settings file; run "
                  f"`supervise {verb} {name} --scope project` to {verb} it there", file=sys.stderr)
            continue
        from .._home import home_dir

        home = Path(home_dir() or "~")  # "~": refused before (install's link_refusals)
        try:
            # a user-scope extension placed with opt_in (every one install places now) serves
            # only opted-in projects, and where both copies load one stands down (core.mjs
            # claimLoad): each scope keeps its files
            if verb == "install" and scope == "project" and home_dir() \
                    and MARK in _read(bridge.entry("user", project_dir, home)) \
                    and not opts_in(bridge.files("user", project_dir, home)[2]):
                # an older user extension (no opt_in) loads in every project and folder and
                # delivers there: defer to it
                print(f"{name}: already placed in {bridge.entry('user', project_dir, home)} "
                      "(user scope), which loads in every project; not placed in the project "
                      f"too: both would load. To move it, run `supervise uninstall {name} "
                      "--scope user` first", file=sys.stderr)
                continue
            if verb != "install":
                print(uninstall(bridge, scope, project_dir, home))
                continue
            print(install(bridge, scope, project_dir, home, budget))
            if scope == "user" and MARK in _read(bridge.entry("project", project_dir, home)):
                # The project's files may be committed: never removed for the user. Both load
                # here; the first copy to load serves and the other stands down (core.mjs
                # claimLoad); the user's serves only projects that opted in (this one did).
                print(f"{name}: the project's extension "
                      f"({_rel(bridge.entry('project', project_dir, home), project_dir)}) stays; "
                      "both load in this project and one of them serves (the digest arrives "
                      "once); the user-scope one serves only projects that opted in")
        except (OSError, ValueError) as err:
            print(f"supervise {verb}: {name}: {err}", file=sys.stderr)
            failed = True
            continue
        if verb == "install":
            for step in bridge.next_steps:
                print(f"  - {step}")
    return failed
