"""``supervise install HARNESS... [--scope project|user] [--project DIR]``.

Merges our hook registration into each harness's own settings file (see
:mod:`supervisor.adapters`), preserving every other key and hook, idempotently; adds the state
dir to ``.git/info/exclude``; prints what the harness needs beyond the file (trust).

Registered commands never depend on ``PATH``: they run this interpreter by absolute path,
``<python> -I -m supervisor hook HARNESS`` (:data:`ISOLATED`: neither a ``supervisor/`` folder
in the project nor the harness's ``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONSTARTUP`` or user
site-packages can shadow the package; supervisord's import name is ``supervisor`` too),
quoted for the shell. The per-event hooks (prompt, post-tool) run it behind the POSIX ``sh``
fast path, ``/bin/sh <package>/hook-fast.sh [--early-exit] <python> -I -m supervisor hook
HARNESS --event EVENT``, which answers "nothing to do" without starting Python
(:data:`FAST_PATH`; docs/session-protocol.md). Timeouts exceed the digest budget by
:data:`~supervisor.adapters._base.TIMEOUT_MARGIN` seconds, in the harness's unit.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .._exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .._harnesses import INSTALLABLE, MCP_CLIENTS
from ..state._project import add_git_exclude
from ._cli import VerbParser, add_directory
from ..adapters import ADAPTERS, Adapter
from ..adapters._base import PROMPT_TIMEOUT, TIMEOUT_MARGIN
from . import _plugins

if TYPE_CHECKING:
    from ..adapters._settings import Entry

USAGE = ("supervise install HARNESS... [--scope project|user] [--plugin] [--project DIR] | "
         "supervise install mcp --for CLIENT [--scope project|user]")


def parser(prog: str, verb_help: str) -> argparse.ArgumentParser:
    """The shared argument parser of ``install`` and ``uninstall``."""
    p = VerbParser(prog=prog, description=verb_help)
    p.add_argument("harnesses", nargs="+", metavar="HARNESS",
                   help=f"one or more of: {', '.join(INSTALLABLE)}, or 'all'; "
                   "or mcp (with --for CLIENT): the `supervise mcp` server")
    p.add_argument("--scope", choices=("project", "user", "local"), default="project",
                   help="project: the project's settings file, usually committed (default); "
                   "user: your settings in $HOME, every project; local: your own uncommitted "
                   "project file (Claude's .claude/settings.local.json, git-ignored)")
    p.add_argument("--for", dest="client", choices=list(MCP_CLIENTS), metavar="CLIENT",
                   help=f"with HARNESS 'mcp': the MCP client whose configuration gets (or loses) "
                   f"the `supervise mcp` server: {', '.join(MCP_CLIENTS)}")
    if prog == "supervise install":
        p.add_argument("--plugin", action="store_true",
                       help="register the harness plugin instead of the settings hooks (Claude "
                       "Code: enables watchkeeper@watchkeeper in the scope's settings file, "
                       "which stays machine-independent, and puts the plugin in Claude's cache "
                       "with `claude plugin install`; Gemini CLI: links the extension; Pi, "
                       "OpenCode: loads the extension package of plugins/ instead of the placed "
                       "bridge, with `pi install` or OpenCode's \"plugin\" list); without it, "
                       "a scope that has the plugin or package moves back")
    add_directory(p)
    return p


class Request(NamedTuple):
    """A parsed ``install``/``uninstall`` request."""

    args: argparse.Namespace
    adapters: list[Adapter]
    bridged: list[str]
    project_dir: Path


def prepare(verb: str, verb_help: str, argv: list[str]) -> Request | int:
    """Parse ``argv`` for ``supervise VERB``: hook harnesses, bridged ones (pi, opencode) and
    the project; an int is the exit status of a usage error (already reported)."""
    from ..adapters import _settings
    from ..bridges._install import split

    args = parser(f"supervise {verb}", verb_help).parse_args(argv)
    args.mcp = "mcp" in args.harnesses  # the MCP server: a client's configuration, not hooks
    if args.mcp != bool(args.client):
        print(f"supervise {verb}: 'mcp' and --for CLIENT go together (supervise {verb} mcp "
              "--for CLIENT)", file=sys.stderr)
        return EXIT_USAGE
    args.harnesses = [h for h in args.harnesses if h != "mcp"]
    args.harnesses, bridged = split(args.harnesses)  # pi, opencode: extension files, not hooks
    adapters = pick(args.harnesses) if args.harnesses or not args.mcp else []
    if isinstance(adapters, str):
        print(f"supervise {verb}: {adapters}", file=sys.stderr)
        return EXIT_USAGE
    return Request(args, adapters, bridged, _settings.find_project_dir(args.directory or Path.cwd()))


def pick(names: list[str]) -> list[Adapter] | str:
    """Adapters for ``names`` (``all`` = every one), or an error message."""
    if "all" in names:
        return list(ADAPTERS.values())
    unknown = [n for n in names if n not in ADAPTERS]
    if unknown:
        from ..bridges._install import NAMES as BRIDGES

        return f"unknown harness {unknown[0]!r} (known: {', '.join([*ADAPTERS, *BRIDGES])}, all)"
    return [ADAPTERS[n] for n in dict.fromkeys(names)]


FAST_PATH = Path(__file__).resolve().parent.parent / "hook-fast.sh"
"""The POSIX ``sh`` fast path for the per-event hooks (shipped inside the package)."""

ISOLATED = "-I"
"""The interpreter flag of every registered command: isolated mode (``-E -s -P``: no
``PYTHON*`` variable, no user site-packages, no working directory on ``sys.path``). Before it,
registrations used ``-P`` alone, which a harness's ``PYTHONPATH`` naming another
``supervisor`` package broke ("No module named supervisor.__main__"); ``doctor`` flags those
and ``install`` rewrites them."""
SHELL = "/bin/sh"
"""The shell that runs :data:`FAST_PATH` (by absolute path: registrations never need PATH)."""


def hook_command(adapter: Adapter, event: str | None = None, python: str | None = None,
                 timeout: float | None = None, opt_in: bool = False) -> str:
    """The shell command registered for ``adapter`` (``event``: None, ``prompt``, ``post-tool``,
    ``pre-compact``, ``resume``: a resumed session's own event, ``--source resume``).

    Session start and pre-compaction (once per compaction: no fast path to gain) run Python
    directly; a per-event hook runs it behind :data:`FAST_PATH`,
    which passes the whole payload on when there may be work and prints nothing otherwise;
    ``--early-exit`` before the interpreter tells it the harness tolerates a hook that leaves
    its payload unread (the harness table's ``early_exit``), so it skips the drain.
    ``timeout`` (seconds; session start, and a prompt hook that may deliver an armed start) is
    the hook timeout registered beside the
    command: it is recorded as ``--registered-timeout`` so the hook clamps its budget to it
    and ``doctor`` can tell when the settings file's timeout no longer matches. ``opt_in``
    (a user-scope registration) adds ``--opt-in``: the hook then serves only projects that
    opted in (:func:`supervisor.session._gates.opt_in_silence`).
    """
    argv = [python or sys.executable, ISOLATED, "-m", "supervisor", "hook", adapter.name]
    if event == "pre-compact":
        argv += ["--event", event]
    elif event == "resume":  # a harness with an event of its own for a resumed session
        argv += ["--source", "resume"]
        if timeout is not None:
            argv += ["--registered-timeout", f"{timeout:g}"]
    elif event:
        early = ["--early-exit"] if adapter.row.early_exit else []
        argv = [SHELL, str(FAST_PATH), *early, *argv, "--event", event]
        if timeout is not None:  # a prompt hook that may deliver an armed start
            argv += ["--registered-timeout", f"{timeout:g}"]
    else:
        argv += list(adapter.extra_args)
        if timeout is not None:
            argv += ["--registered-timeout", f"{timeout:g}"]
    if opt_in:
        argv.append("--opt-in")
    return shlex.join(argv)


def isolated_reach_problem() -> str | None:
    """Why the registered ``python -I -m supervisor`` (:data:`ISOLATED`) would not find this
    package, or None: it is found only through ``PYTHONPATH`` or the user site-packages,
    which isolated mode leaves out (the hook then fails with "No module named supervisor")."""
    import site

    import supervisor

    top = os.path.dirname(os.path.dirname(os.path.abspath(str(supervisor.__file__))))
    env_path = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    user = getattr(site, "USER_SITE", None) or ""
    if top in env_path:
        where = "PYTHONPATH"
    elif user and (top == os.path.abspath(user) or top.startswith(os.path.abspath(user) + os.sep)):
        where = "the user site-packages"
    else:
        return None
    return (f"watchkeeper is found through {where} ({top}), which the registered isolated "
            f"command ({ISOLATED}) does not read: the hook would fail. Install it into a venv "
            "or with `pipx install`, then run `supervise install` again.")


def session_timeout(budget: float) -> float:
    """Seconds to register for the session-start hook: the budget plus the margin."""
    return float(math.ceil(budget) + TIMEOUT_MARGIN)


def entries(adapter: Adapter, budget: float, python: str | None = None,
            scope: str = "project") -> list[Entry]:
    """The handlers ``install`` registers for ``adapter`` (see :class:`_settings.Entry`) at
    ``scope``. A user-scope registration serves many projects: it carries ``--opt-in`` and
    its timeout fits at least the default budget (a project left at the default must not
    outgrow a timeout sized for the project install ran in)."""
    from ..adapters._settings import Entry
    from ..config._schema import DEFAULT_BUDGET

    user = scope == "user"
    seconds = session_timeout(max(budget, DEFAULT_BUDGET) if user else budget)
    out = [Entry(adapter.session_event, adapter.session_matcher,
                 hook_command(adapter, python=python, timeout=seconds, opt_in=user),
                 adapter.timeout_value(seconds))]
    if adapter.resume_event:
        out.append(Entry(adapter.resume_event, adapter.session_matcher,
                         hook_command(adapter, "resume", python, timeout=seconds, opt_in=user),
                         adapter.timeout_value(seconds)))
    if adapter.prompt_event:
        # a prompt hook that may deliver an armed start (a digest) gets the session's timeout,
        # clamped to the harness's own where a registration carries none (Cline's files)
        limit = seconds if adapter.prompt_may_start else None
        if limit is not None and adapter.shape == "files" and adapter.default_timeout:
            limit = min(limit, adapter.default_timeout)
        out.append(Entry(adapter.prompt_event, None,
                         hook_command(adapter, "prompt", python, timeout=limit, opt_in=user),
                         adapter.timeout_value(limit or PROMPT_TIMEOUT)))
    if adapter.compact_event:
        out.append(Entry(adapter.compact_event, None,
                         hook_command(adapter, "pre-compact", python, opt_in=user),
                         adapter.timeout_value(PROMPT_TIMEOUT)))
    if adapter.post_tool_event:
        out.append(Entry(adapter.post_tool_event, adapter.post_tool_matcher,
                         hook_command(adapter, "post-tool", python, opt_in=user),
                         adapter.timeout_value(PROMPT_TIMEOUT)))
    return out


def project_budget(project_dir: Path) -> tuple[float, str | None]:
    """The digest budget in seconds for ``project_dir`` and a warning when the config is bad."""
    from ..config._schema import DEFAULT_BUDGET, load_config
    from .._errors import ConfigError

    try:
        return load_config(project_dir).budget, None
    except ConfigError as err:
        return DEFAULT_BUDGET, f"warning: {err}; registered timeouts assume the default budget"


def _rel(path: Path, project_dir: Path) -> str:
    try:
        return str(path.relative_to(project_dir))
    except ValueError:
        return str(path)


def link_refusals(verb: str, request: Request, home: Path) -> list[str]:
    """Refusal lines for every file ``verb`` would write or remove that is (or sits in a folder
    that is) a symbolic link: the harness settings files and the bridges' files. ``install`` and
    ``uninstall`` print them and exit 1 having written nothing (a hostile clone can ship
    ``.claude/settings.json`` linked to the user's own file)."""
    from ..adapters import _settings
    from ..bridges._install import get as bridge

    args, adapters, bridged, project_dir = request
    paths: list[Path] = []
    for adapter in adapters:
        if args.scope in adapter.scopes:
            scope = args.scope
        elif verb == "uninstall":
            scope = adapter.scopes[0]
        else:
            continue
        paths.append(adapter.settings_path(scope, project_dir, home))
    if args.scope in ("project", "user"):
        for name in bridged:
            paths += bridge(name).files(args.scope, project_dir, home)
            paths.append(_plugins.package_config(name, args.scope, project_dir, home))
    mcp_file = mcp_path(args, project_dir, home)
    if isinstance(mcp_file, Path):
        paths.append(mcp_file)
    if not _is_folder(home) and any(path.is_relative_to(home) for path in paths):
        # HOME unset-to-empty, relative or missing: a user-level file would land in the current
        # directory or create a home folder (HOME=/nonexistent made /nonexistent/.codex)
        shown = str(home) if os.environ.get("HOME") != "" else ""
        return [f"supervise {verb}: the home directory {shown!r} (HOME) is not "
                "an existing folder given by an absolute path; set HOME; nothing written"]
    return [f"supervise {verb}: {line}" for line in _settings.refuse_links(paths, project_dir, home)]


def mcp_path(args: argparse.Namespace, project_dir: Path, home: Path) -> Path | str | None:
    """The MCP configuration file ``install``/``uninstall mcp --for CLIENT`` edits, an error
    line when the client has no file for ``--scope``, or None without ``mcp``."""
    if not getattr(args, "mcp", False):
        return None
    from . import _mcp_clients

    client = _mcp_clients.CLIENTS[args.client]
    scope = args.scope if args.scope != "local" else "project"
    if all(s != scope for s, _ in client.mcp_files):
        scope = client.mcp_files[0][0]  # goose: user only (said when it is used)
    return _mcp_clients.path(client, scope, project_dir, home)


def mcp_verb(verb: str, args: argparse.Namespace, project_dir: Path, home: Path) -> bool:
    """Add or remove the ``supervise mcp`` entry in ``--for CLIENT``'s configuration; one
    line says what happened (errors on stderr). Returns True when it failed."""
    from .._errors import ConfigError
    from . import _mcp_clients

    client = _mcp_clients.CLIENTS[args.client]
    path = mcp_path(args, project_dir, home)
    assert isinstance(path, Path)
    where = _rel(path, project_dir)
    try:
        if verb == "install":
            changed = _mcp_clients.install(client, path)
        else:
            changed = _mcp_clients.uninstall(client, path)
            if changed and not os.path.lexists(path) and path.parent not in (project_dir, home):
                try:  # the client's folder install created (.codex/, .cursor/), only when empty
                    path.parent.rmdir()
                except OSError:
                    pass
    except (ConfigError, OSError) as err:
        msg = str(err) if isinstance(err, ConfigError) else f"{path}: cannot write: {err.strerror or err}"
        print(f"supervise {verb}: mcp ({client.label}): {msg}", file=sys.stderr)
        return True
    command = shlex.join([_mcp_clients.COMMAND, *_mcp_clients.entry_args(client)])
    if verb == "install":
        print(f"mcp: {client.label}: {'registered' if changed else 'already registered (unchanged)'} "
              f"the server `{command}` in {where}")
        import importlib.util
        import shutil

        from .mcp import command_install_hint, sdk_install_hint

        if shutil.which(_mcp_clients.COMMAND) is None:
            print(f"note: {_mcp_clients.COMMAND} is not on PATH here; {client.label} runs it "
                  f"from PATH: {command_install_hint()}")
        elif importlib.util.find_spec("mcp") is None:
            print("note: the MCP server needs the SDK (the watchkeeper[mcp] extra): "
                  f"{sdk_install_hint()}")
        if client.mcp_note:
            print(f"note: {client.mcp_note}")
        try:
            data, _raw = _mcp_clients.read(client, path)
        except ConfigError:
            data = None
        if not _mcp_clients.wait_ok(client, data):
            print(f"note: {client.mcp_wait} in {where} is below {_mcp_clients.wait_ms()} ms (kept): "
                  f"{client.label} may send its first request before the server answers")
    else:
        print(f"mcp: {client.label}: " + (f"removed the server from {where}" if changed
                                          else f"nothing to remove in {where}"))
    return False


def _is_folder(home: Path) -> bool:
    if os.environ.get("HOME") == "":  # Python then says "/": never meant as a home
        return False
    try:
        return home.is_absolute() and home.is_dir()
    except OSError:
        return False


def _install_plugin(adapter: Adapter, scope: str, path: Path, data: dict[str, object] | None,
                    project_dir: Path) -> bool:
    """Move ``scope`` of ``adapter`` to its plugin: our settings hooks removed from ``path``,
    the plugin enabled there, then put in the harness's cache by its CLI
    (:func:`supervisor.commands._plugins.run_setup`). False (said on stderr) when that
    failed: the settings file is written, the plugin not yet loaded."""
    from ..adapters import _settings

    where = _rel(path, project_dir)
    new, removed = _settings.remove(dict(data or {}), adapter, path)
    new = _plugins.enable(new, adapter)
    if new != data and new:
        _settings.write_settings(path, new)
    elif data is not None and not new:
        path.unlink()  # it held only our hooks (Gemini: the extension replaces them)
        try:  # and the harness folder install created, only when now empty
            path.parent.rmdir()
        except OSError:
            pass
    moved = f", {removed} settings hook(s) of ours removed" if removed else ""
    if _plugins.in_settings(adapter):
        print(f"{adapter.name}: plugin {adapter.plugin} enabled in {where}{moved}")
    elif removed:
        print(f"{adapter.name}: {removed} settings hook(s) of ours removed from {where}")
    if scope == "local":
        add_git_exclude(project_dir, "/" + where)
    problem = _plugins.run_setup(adapter, "local" if scope == "local" else scope, project_dir)
    if problem:
        print(f"supervise install: {adapter.name}: the plugin is not installed: {problem}",
              file=sys.stderr)
        return False
    if _plugins.in_settings(adapter):
        print(f"{adapter.name}: plugin {adapter.plugin} installed in {adapter.title}'s cache "
              "(it runs supervise-hook from PATH)")
    else:
        print(f"{adapter.name}: extension {adapter.plugin} linked (user level: it serves the "
              "projects that opted in, and runs supervise-hook from PATH)")
        if scope != "user":
            return _opt_in(adapter, project_dir)
    return True


OPT_IN_TOML = ("# watchkeeper: this project opts in to the user-level installs (the Gemini CLI\n"
               "# extension, `supervise install --scope user`); every key at its default\n"
               "# (`supervise config --default` prints them).\n")
"""The ``supervise.toml`` that ``install gemini --plugin`` writes in a project that had not
opted in: the extension serves only such projects, and the settings hooks it replaces were
this project's opt-in (:func:`supervisor.session._gates.opted_in`)."""


def _opt_in(adapter: Adapter, project_dir: Path) -> bool:
    """Opt ``project_dir`` in to the user-level extension that replaced its settings hooks:
    :data:`OPT_IN_TOML` as its ``supervise.toml`` unless it opted in already. False (said on
    stderr) when the file cannot be written."""
    from ..config._plan import CONFIG_FILE
    from ..session._gates import opted_in

    if opted_in(adapter.name, project_dir):
        return True
    from ..state._fsutil import atomic_write

    target = project_dir / CONFIG_FILE  # absent, no link either (find_config: lexists)
    try:
        atomic_write(target, OPT_IN_TOML.encode("utf-8"))
    except OSError as err:
        print(f"supervise install: {adapter.name}: cannot write {target} ({err.strerror or err}): "
              "the extension stays silent in this project until it opts in", file=sys.stderr)
        return False
    print(f"{adapter.name}: wrote {_rel(target, project_dir)} (this project opts in: the "
          "extension serves it and every subdirectory session of it)")
    return True


def packages_verb(verb: str, names: list[str], scope: str, project_dir: Path, home: Path) -> bool:
    """``install``: make each bridge harness of ``names`` (Pi, OpenCode) load our extension
    package of ``plugins/`` at ``scope`` and remove the bridge files placed at that scope (the
    move from the placed bridge to the package; another scope's files are never touched);
    ``uninstall``: stop it loading the package at ``scope``
    (:func:`supervisor.commands._plugins.add_package`, ``remove_package``). One line each,
    errors on stderr; True when one failed."""
    from .._errors import ConfigError
    from ..bridges._install import get as bridge, uninstall as unplace

    failed = False
    for name in names:
        if scope not in ("project", "user"):
            print(f"{name}: skipped: {bridge(name).title} has no {scope} configuration; run "
                  f"`supervise {verb} {name} --plugin --scope project`", file=sys.stderr)
            continue
        try:
            if verb == "install":
                line, problem = _plugins.add_package(name, scope, project_dir, home)
                lines = [line] if line else []
            else:
                lines, problem = _plugins.remove_package(name, scope, project_dir, home)
            for line in lines:
                print(line)
            if problem:
                print(f"supervise {verb}: {name}: the package is not "
                      f"{'added' if verb == 'install' else 'removed'}: {problem}", file=sys.stderr)
                failed = True
                continue
            if verb == "install":
                placed = unplace(bridge(name), scope, project_dir, home)
                if "removed" in placed:
                    print(f"{placed} (the package replaces it)")
                if scope == "project":
                    print(f"note: {_rel(_plugins.package_config(name, scope, project_dir, home), project_dir)} "
                          "now names this install's package folder (the packages are not "
                          "published on npm yet): a teammate's path differs. To keep it yours "
                          f"alone, use `supervise install {name} --plugin --scope user`.")
        except (ConfigError, OSError, ValueError) as err:
            print(f"supervise {verb}: {name}: {err}", file=sys.stderr)
            failed = True
    return failed


def main(argv: list[str]) -> int:
    """Install each named harness; exit 1 if any settings file was refused (or is behind a
    symbolic link: then nothing is written) or a harness was not registered because our hook
    is registered for it at another scope (both would fire), 2 on bad usage."""
    from ..adapters import _settings
    from ..bridges._install import run_verb

    request = prepare("install", "register the watchkeeper hook with harnesses", argv)
    if isinstance(request, int):
        return request
    from .._home import home_dir

    home = Path(home_dir() or "~")  # "~" (refused by link_refusals) when there is no home
    refusals = link_refusals("install", request, home)
    if refusals:
        print("\n".join(refusals), file=sys.stderr)
        return EXIT_FAILURE
    args, adapters, bridged, project_dir = request
    budget, warning = project_budget(project_dir)
    if warning:
        print(warning, file=sys.stderr)
    if args.plugin:
        failed = packages_verb("install", bridged, args.scope, project_dir, home)
    else:
        failed = run_verb("install", bridged, args.scope, project_dir, budget)
        if bridged and not failed:  # a scope that loaded the package moves back to the bridge
            failed = packages_verb("uninstall", bridged, args.scope, project_dir, home)
    if args.mcp:
        failed |= mcp_verb("install", args, project_dir, home)
    steps: list[str] = []
    notes: list[str] = []
    for adapter in adapters:
        if args.scope not in adapter.scopes:
            # Never write a user-level file the user did not ask for (Grok reads user settings only).
            print(f"{adapter.name}: skipped: {adapter.title} has no {args.scope} settings file; "
                  f"run `supervise install {adapter.name} --scope "
                  f"{adapter.scopes[0]}` to register it there", file=sys.stderr)
            continue
        scope = args.scope
        path = adapter.settings_path(scope, project_dir, home)
        if args.plugin and not adapter.plugin:
            print(f"{adapter.name}: skipped: {adapter.title} has no watchkeeper plugin; run "
                  f"`supervise install {adapter.name}` for its settings hooks", file=sys.stderr)
            failed = True
            continue
        # (a user-scope registration carries --opt-in: it yields to the project's)
        elsewhere = ([] if scope == "user" or args.plugin else
                     _settings.registered_elsewhere(adapter, scope, project_dir, home))
        if elsewhere:  # a second scope would fire too: defer to the first (issue 22)
            other, where = elsewhere[0]
            print(f"{adapter.name}: already registered in {_rel(where, project_dir)} ({other} "
                  f"scope); not registered in {_rel(path, project_dir)} too: both would fire. "
                  f"To move it, run `supervise uninstall {adapter.name} --scope {other}` first",
                  file=sys.stderr)
            failed = True  # not registered where asked: a script must not read success
            continue
        try:
            data = _settings.read_registration(adapter, path)
            if args.plugin:
                failed |= not _install_plugin(adapter, scope, path, data, project_dir)
                continue
            new = _settings.merge(data or {}, adapter, entries(adapter, budget, scope=scope), path)
            new, moved = _plugins.disable(new, adapter)
            if moved:
                print(f"{adapter.name}: plugin {', '.join(moved)} no longer enabled in "
                      f"{_rel(path, project_dir)} (the settings hooks replace it)")
            if new == data:
                print(f"{adapter.name}: already installed in {_rel(path, project_dir)} (unchanged)")
            else:
                _settings.write_registration(adapter, path, new)
                events = ", ".join(dict.fromkeys(e.event for e in entries(adapter, budget, scope=scope)))
                print(f"{adapter.name}: registered {events} in {_rel(path, project_dir)}")
            if scope == "local":
                add_git_exclude(project_dir, "/" + _rel(path, project_dir))
            elif scope == "project" and adapter.local_settings:
                notes.append(f"{_rel(path, project_dir)} is usually committed, and the registration "
                             f"names this machine's interpreter ({sys.executable}): a teammate's "
                             "session would run a path that does not exist there. To keep it "
                             f"yours alone, run `supervise uninstall {adapter.name}` then "
                             f"`supervise install {adapter.name} --scope local` "
                             f"({adapter.local_settings}, git-ignored).")
        except Exception as err:  # ConfigError, OSError: one line, the file untouched
            from .._errors import ConfigError

            if not isinstance(err, (ConfigError, OSError)):
                raise
            msg = str(err) if isinstance(err, ConfigError) else f"{path}: cannot write: {err.strerror or err}"
            print(f"supervise install: {adapter.name}: {msg}", file=sys.stderr)
            failed = True
            continue
        steps += adapter.next_steps
    added = add_git_exclude(project_dir)
    if added:
        print(f"added /.supervise/ to {_rel(Path(added), project_dir)}")
    unreachable = isolated_reach_problem()
    if unreachable:
        notes.append(unreachable)
    for note in notes:
        print(f"note: {note}")
    if steps:
        print("next steps:")
        for step in dict.fromkeys(steps):
            print(f"  - {step}")
        print("  - run `supervise doctor` to check the registration, timeouts and config.")
    from ..session._off import off_line, off_reason

    off = off_reason(project_dir)
    if off:  # installed, but quiet until turned on: say so once
        print(off_line(off, "the hooks are registered but stay quiet until it is turned on"),
              end="")
    return EXIT_FAILURE if failed else EXIT_OK
