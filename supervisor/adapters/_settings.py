"""Read, merge, un-merge and write a harness's hook settings file (JSON).

Used by ``install``, ``uninstall`` and ``doctor``; never on the hook's hot path. Every other key
and every hook of the user is preserved; ours are recognised by :func:`is_ours` (the command
holds ``-m supervisor hook``, the ``supervise-hook`` shim, or ``supervise hook``). Writes are
atomic (temp file + ``os.replace`` in the same folder, mode kept); a settings file or folder
that is a symbolic link is refused, never written through (:func:`refuse_links`).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

from .._errors import ConfigError
from ..state._fsutil import atomic_write, link_on_path, link_refusal, read_small_file
from ._base import HOOK_MARKER, SHIM_MARKER, Adapter

_PLAIN_RE = re.compile(r"(^|[\s/\"'])supervise hook(\s|$)")


class Entry(NamedTuple):
    """One handler to register: event name, matcher (None = key omitted), command, timeout
    (already in the harness's unit)."""

    event: str
    matcher: str | None
    command: str
    timeout: int


def is_ours(command: object) -> bool:
    """True when a registered ``command`` is a watchkeeper hook."""
    if not isinstance(command, str):
        return False
    return HOOK_MARKER in command or SHIM_MARKER in command or bool(_PLAIN_RE.search(command))


def find_project_dir(start: Path) -> Path:
    """The git top level containing ``start``, else ``start`` itself (absolute)."""
    try:
        out = subprocess.run(["git", "-C", str(start), "rev-parse", "--show-toplevel"],
                             capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return start.absolute()
    top = os.fsdecode(out.stdout).rstrip("\n")  # a folder name need not be UTF-8
    return Path(top) if out.returncode == 0 and top else start.absolute()


def refuse_links(paths: list[Path], project_dir: Path, home: Path) -> list[str]:
    """One refusal line per path in ``paths`` that is, or sits in a folder that is, a symbolic
    link below ``project_dir`` or ``home`` (see :func:`supervisor.state._fsutil.link_on_path`);
    empty when every path is safe to write. ``install`` and ``uninstall`` check every file
    they would touch first and write nothing when this is not empty."""
    lines: list[str] = []
    roots = tuple(sorted({project_dir.absolute(), home.absolute()}, key=lambda p: -len(p.parts)))
    for path in paths:
        found = link_on_path(path.absolute(), roots)
        if found:
            line = link_refusal(*found)
            if line not in lines:
                lines.append(line)
    return lines


_MAX_SETTINGS = 4 * 1024 * 1024
"""Bytes of a harness settings file read at most (a larger one is an error, never read)."""


def read_settings(path: Path) -> dict[str, Any] | None:
    """Parse ``path``; None when it does not exist; ``{}`` when empty or blank.

    Raises:
        ConfigError: not valid JSON, not a JSON object, or unreadable (one line; the file is
            never touched).
    """
    data = read_small_file(path, _MAX_SETTINGS, what="a settings file", missing_ok=True)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: cannot read: {err}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigError(f"{path}: not valid JSON (nested too deeply to parse)") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON (line {err.lineno}, column {err.colno}: "
                          f"{err.msg}); fix or remove it, it was left untouched") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top level; left untouched")
    return data


def write_settings(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as 2-space-indented JSON plus a newline, atomically.

    Raises:
        OSError: the folder cannot be created or written.
        ConfigError: ``path`` is a symbolic link (nothing is written through a link).
    """
    if path.is_symlink():  # callers check the whole path first (refuse_links); never follow
        raise ConfigError(link_refusal(path, os.readlink(path)))
    target = path
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode: int | None = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    atomic_write(target, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"),
                 mode=mode)


def _table(data: dict[str, Any], key: str, path: Path, kind: type, create: bool) -> Any:
    value = data.get(key)
    if value is None:
        if not create:
            return None
        value = data[key] = kind()
    if not isinstance(value, kind):
        raise ConfigError(f"{path}: key '{key}' is not a JSON {'object' if kind is dict else 'array'}; "
                          "left untouched")
    return value


FLAT = {"cursor": "command", "copilot": "bash", "files": "command"}
"""Shapes whose event lists hold handlers directly (no groups), and the key of the command."""


def _strip_ours(groups: list[Any], shape: str) -> list[Any]:
    """``groups`` without our handlers; a group emptied by that is dropped."""
    kept: list[Any] = []
    for group in groups:
        if shape in FLAT:
            if not (isinstance(group, dict) and is_ours(group.get(FLAT[shape]))):
                kept.append(group)
            continue
        handlers = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(handlers, list):
            kept.append(group)
            continue
        mine = [h for h in handlers if isinstance(h, dict) and is_ours(h.get("command"))]
        if not mine:
            kept.append(group)
            continue
        rest = [h for h in handlers if h not in mine]
        if rest:
            kept.append({**group, "hooks": rest})
    return kept


def merge(data: dict[str, Any], adapter: Adapter, entries: list[Entry], path: Path) -> dict[str, Any]:
    """A copy of ``data`` with exactly our ``entries`` registered (older ones of ours replaced).

    Installing twice gives an equal result; another hook of the user is never changed.

    Raises:
        ConfigError: ``hooks`` or an event's value has the wrong JSON type.
    """
    new = copy.deepcopy(data)
    if adapter.shape in ("cursor", "copilot"):
        new.setdefault("version", 1)
    hooks = _table(new, "hooks", path, dict, create=True)
    for event in dict.fromkeys(e.event for e in entries):
        groups = _table(hooks, event, path, list, create=True)
        groups = _strip_ours(groups, adapter.shape)
        for entry in (e for e in entries if e.event == event):
            if adapter.shape == "cursor":
                groups.append({"command": entry.command, "timeout": entry.timeout})
            elif adapter.shape == "copilot":
                groups.append({"type": "command", "bash": entry.command,
                               "timeoutSec": entry.timeout})
            elif adapter.shape == "files":
                groups.append({"command": entry.command})
            else:
                group: dict[str, Any] = {} if entry.matcher is None else {"matcher": entry.matcher}
                group["hooks"] = [{"type": "command", "command": entry.command, "timeout": entry.timeout}]
                groups.append(group)
        hooks[event] = groups
    return new


def remove(data: dict[str, Any], adapter: Adapter, path: Path) -> tuple[dict[str, Any], int]:
    """A copy of ``data`` without our handlers, and how many were removed.

    An event list or the ``hooks`` table left empty by the removal is dropped too (so install
    then uninstall gives back the original object when it had no hooks table).

    Raises:
        ConfigError: ``hooks`` is not a JSON object.
    """
    new = copy.deepcopy(data)
    hooks = _table(new, "hooks", path, dict, create=False)
    if not hooks:
        return new, 0
    removed = 0
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = _strip_ours(groups, adapter.shape)
        count = sum(len(ours(g, adapter.shape)) for g in groups)
        if count:
            removed += count
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if removed and not hooks:
        del new["hooks"]
        if adapter.shape in ("cursor", "copilot") and new == {"version": 1}:
            new = {}
    return new, removed


def ours(group: Any, shape: str) -> list[dict[str, Any]]:
    """Our handlers in one registration group (Cursor, Copilot: the entry itself when it is
    ours)."""
    if not isinstance(group, dict):
        return []
    if shape in FLAT:
        return [group] if is_ours(group.get(FLAT[shape])) else []
    handlers = group.get("hooks")
    if not isinstance(handlers, list):
        return []
    return [h for h in handlers if isinstance(h, dict) and is_ours(h.get("command"))]


def registered(data: dict[str, Any] | None, adapter: Adapter) -> dict[str, list[dict[str, Any]]]:
    """``{event: [our handler, ...]}`` found in ``data`` (events without ours are absent);
    a Copilot handler's ``bash`` and ``timeoutSec`` are also given as ``command`` and
    ``timeout``, the keys ``doctor`` reads."""
    found: dict[str, list[dict[str, Any]]] = {}
    hooks = (data or {}).get("hooks")
    if not isinstance(hooks, dict):
        return found
    for event, groups in hooks.items():
        if isinstance(groups, list):
            handlers = [h for g in groups for h in ours(g, adapter.shape)]
            if adapter.shape == "copilot":  # doctor reads "command" and "timeout"
                handlers = [{**h, "command": h.get("bash"), "timeout": h.get("timeoutSec")}
                            for h in handlers]
            if handlers:
                found[event] = handlers
    return found


def double_registration(name: str, label: str, places: list[tuple[str, str]],
                        stands_down: bool = False) -> tuple[str, str, str] | None:
    """The one double-registration rule, for every harness (``doctor``): ``places`` are the
    registrations of ours found for harness ``name`` (``label`` in messages), in precedence
    order, each ``(where, how to remove it)``: a settings file per scope, an extension entry,
    later a plugin or an MCP server beside a settings install. Two or more fire on every
    event, each delivering its own copy (a repeated session start prints nothing, but every
    other event and every other delivery path does not know of the first), so it is a
    ``FAIL`` whose fix keeps the first and removes the others. ``stands_down``: copies of
    our extension bridge in one load, of which the first serves and the others stand down
    (``core.mjs`` ``claimLoad``), so the digest arrives once; still a ``FAIL`` (an older
    bridge among them does not stand down, and two copies drift apart), said as it is.
    Returns ``(status, text, fix)`` or None for at most one registration."""
    if len(places) < 2:
        return None
    where = " and ".join(w for w, _ in places)
    rest = "; ".join(f"`{how}`" for _, how in places[1:])
    what = ("both load; this version's bridge serves from one of them and the other stands "
            "down, but an older copy would deliver again" if stands_down else
            "every registration fires, and the model gets its context more than once")
    return ("FAIL", f"watchkeeper is registered {len(places)} times for {label} ({where}): "
            f"{what}", f"keep one: {rest}")


def serving(regs: dict[str, list[dict[str, Any]]], adapter: Adapter) -> bool:
    """``regs`` (:func:`registered`) hold a session-start registration that fires beside any
    other: not one carrying ``--opt-in`` (a user-scope install, which stays silent where the
    harness loads a project registration of ours: ``supervisor.session._gates.opt_in_silence``)."""
    session = regs.get(adapter.session_event, [])
    return any("--opt-in" not in str(h.get("command", "")) for h in session) or (
        bool(regs) and not session)


def registered_elsewhere(adapter: Adapter, scope: str, project_dir: Path,
                         home: Path) -> list[tuple[str, Path]]:
    """``[(other scope, its settings file)]`` that already hold a registration of ours for
    ``adapter`` besides ``scope`` that would fire beside a new one (:func:`serving`;
    ``install`` then defers instead of registering twice). An unreadable or linked file counts
    as none (``install`` reports it when it writes there)."""
    out: list[tuple[str, Path]] = []
    for other in adapter.scopes:
        if other == scope:
            continue
        try:
            path = adapter.settings_path(other, project_dir, home)
            if refuse_links([path], project_dir, home):
                continue
            if serving(registered(read_settings(path), adapter), adapter):
                out.append((other, path))
        except Exception:  # ConfigError (bad JSON) or OSError: not ours to judge here
            continue
    return out


HOOK_FILE_HEADER = "#!/bin/sh\n# watchkeeper: supervise hook (remove with `supervise uninstall {name}`)\n"
"""The first lines of an executable hook file ``install`` writes (shape ``files``, Cline)."""

_MAX_HOOK_FILE = 64 * 1024
"""Bytes of an existing hook file read at most to tell whether it is ours."""


def _hook_file_command(data: bytes) -> str | None:
    """The command of a hook file ``install`` wrote (its ``exec`` line), else None."""
    text = data.decode("utf-8", "replace")
    if not text.startswith("#!/bin/sh\n# watchkeeper: "):
        return None
    for line in text.splitlines():
        if line.startswith("exec "):
            return line[5:]
    return None


def read_registration(adapter: Adapter, path: Path) -> dict[str, Any] | None:
    """:func:`read_settings` for every shape. For shape ``files`` (one executable per event in
    the folder ``path``, Cline) it reads the folder as ``{"hooks": {EVENT: [{"command": C}]}}``:
    ours with their command, another program's file as a handler that is not ours (so
    :func:`write_registration` refuses to replace it). None when the folder does not exist.

    Raises:
        ConfigError: a file or folder cannot be read, or ``path`` is not a folder.
    """
    if adapter.shape != "files":
        return read_settings(path)
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_dir():
        raise ConfigError(f"{path}: expected a folder of hook files; left untouched")
    hooks: dict[str, Any] = {}
    for event in adapter.hook_file_events:
        file = path / event
        if not os.path.lexists(file):
            continue
        data = None if file.is_symlink() else read_small_file(file, _MAX_HOOK_FILE,
                                                               what="a hook file", missing_ok=True)
        command = _hook_file_command(data or b"")
        hooks[event] = [{"command": command} if command is not None else
                        {"command": f"(not ours: {file})", "foreign": True}]
    return {"hooks": hooks} if hooks else {}


def write_registration(adapter: Adapter, path: Path, data: dict[str, Any]) -> None:
    """:func:`write_settings` for every shape. Shape ``files``: write one executable file per
    event of ours in ``data`` (mode 0755, atomically) and remove our files of the events it no
    longer has; another program's file is never touched; the folder is removed when that
    leaves it empty.

    Raises:
        ConfigError: a file of another program holds an event we must register, or ``path``
            is a symbolic link.
        OSError: the folder cannot be created or written.
    """
    if adapter.shape != "files":
        write_settings(path, data)
        return
    if path.is_symlink():
        raise ConfigError(link_refusal(path, os.readlink(path)))
    raw = data.get("hooks")
    hooks: dict[str, Any] = raw if isinstance(raw, dict) else {}
    current = read_registration(adapter, path) or {}
    for event, handlers in (current.get("hooks") or {}).items():
        if any(h.get("foreign") for h in handlers) and any(
                is_ours(h.get("command")) for h in hooks.get(event, [])):
            raise ConfigError(f"{path / event}: a hook file of another program is there; "
                              f"{adapter.title} runs one file per event, so ours was not "
                              "written (move yours aside, or call it from a hook of yours)")
    path.mkdir(parents=True, exist_ok=True)
    for event in adapter.hook_file_events:
        mine = [h for h in hooks.get(event, []) if is_ours(h.get("command"))]
        file = path / event
        if mine:
            body = HOOK_FILE_HEADER.format(name=adapter.name) + f"exec {mine[-1]['command']}\n"
            atomic_write(file, body.encode("utf-8"), mode=0o755)
        elif os.path.lexists(file) and not file.is_symlink():
            now = read_small_file(file, _MAX_HOOK_FILE, what="a hook file", missing_ok=True)
            if _hook_file_command(now or b"") is not None:
                file.unlink()
    try:  # the hooks folder install created, only when now empty
        path.rmdir()
    except OSError:
        pass
