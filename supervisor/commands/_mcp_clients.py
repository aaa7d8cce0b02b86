"""Where each MCP client reads its servers, and our entry there (``install mcp --for CLIENT``).

Each client is a row of the harness table (:mod:`supervisor._harnesses`: ``mcp_files``,
``mcp_format``, ``mcp_note``; goose is a row of kind ``mcp``). Our entry runs
``supervise mcp --for CLIENT`` found on ``PATH`` (pipx, uv tool), so a project file holds
nothing machine-specific. ``install`` merges it (every other server and key kept),
``uninstall`` removes it, ``doctor`` checks it; a file or folder that is a symbolic link is
refused as for the hook settings (:func:`supervisor.adapters._settings.refuse_links`).

Formats (DOC, each client's MCP page):

- ``json``: ``{"mcpServers": {"watchkeeper": {"command": "supervise", "args": [...]}}}`` (Claude
  Code ``.mcp.json`` and ``~/.claude.json``, Cursor ``.cursor/mcp.json``, Gemini CLI
  ``settings.json``);
- ``toml``: a ``[mcp_servers.watchkeeper]`` table with ``command`` and ``args`` (Codex
  ``config.toml``), edited as text: our table alone is added or removed, every other byte
  kept;
- ``yaml``: ``extensions.watchkeeper`` with ``type: stdio``, ``cmd``, ``args``, ``enabled``
  (goose ``~/.config/goose/config.yaml``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .._harnesses import BY_NAME, MCP_CLIENTS, Harness
from ..adapters import _settings

NAME = "watchkeeper"
"""Our server's name in every client's configuration (``serverInfo.name`` too)."""

COMMAND = "supervise"
"""The program of our entry, found on ``PATH`` by the client."""


CLIENTS: dict[str, Harness] = {name: BY_NAME[name] for name in MCP_CLIENTS}
"""``{name: row}`` of the harness table's rows that read MCP servers (``mcp_files``)."""


def path(client: Harness, scope: str, project: Path, home: Path) -> Path:
    """The MCP configuration file of ``client`` for ``scope``: a project path below
    ``project``, a user path below the client's user folder
    (:meth:`supervisor._harnesses.Harness.user_folder`: ``$CODEX_HOME``,
    ``$XDG_CONFIG_HOME``) or, written ``~/...``, below ``home``.

    Raises:
        ValueError: the client has no file for that scope.
    """
    for name, rel in client.mcp_files:
        if name == scope:
            if scope == "project":
                return project / rel
            if rel.startswith("~/"):
                return home / rel[2:]
            return Path(client.user_folder(str(home))) / rel
    raise ValueError(f"{client.label} has no {scope} MCP configuration "
                     f"(scopes: {', '.join(s for s, _ in client.mcp_files)})")


def entry_args(client: Harness) -> list[str]:
    """The arguments of our entry: ``mcp --for CLIENT``."""
    return ["mcp", "--for", client.name]


_TOML_HEADER = re.compile(r"^\s*\[\s*mcp_servers\s*\.\s*(\"watchkeeper\"|watchkeeper)\s*\]\s*(#.*)?$")
_TOML_ANY_HEADER = re.compile(r"^\s*\[")


def entry(client: Harness) -> dict[str, Any]:
    """Our entry in a ``json`` or ``toml`` client's server table: ``command``, ``args``; for a
    client with a trust key (the harness table's ``mcp_trust``: Gemini CLI) that key set to
    true (both tools are read-only); for one with a start-up bound (``mcp_startup``: Codex)
    that key set to :data:`supervisor.commands.mcp.ANSWER_WITHIN` seconds."""
    out: dict[str, Any] = {"command": COMMAND, "args": entry_args(client)}
    if client.mcp_trust:
        out[client.mcp_trust] = True
    if client.mcp_startup:  # Codex: a server slower than its 10 s default is dropped
        from .mcp import ANSWER_WITHIN

        out[client.mcp_startup] = int(ANSWER_WITHIN)
    return out


WAIT_MARK = "# watchkeeper: supervise mcp answers within this"
"""The comment on the wait setting ``install`` adds (the harness table's ``mcp_wait``), by
which ``uninstall`` knows the line is ours."""


def wait_ms() -> int:
    """Milliseconds a client bounding its wait for MCP servers waits for ours
    (:data:`supervisor.commands.mcp.ANSWER_WITHIN`)."""
    from .mcp import ANSWER_WITHIN

    return int(ANSWER_WITHIN * 1000)


def _toml_block(client: Harness) -> str:
    lines = [f"[mcp_servers.{NAME}]"]
    for key, value in entry(client).items():
        lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if value is True:
        return "true"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_wait(client: Harness, text: str, data: Any) -> str:
    """``text`` with the client's wait setting (``mcp_wait``) first, marked as ours, unless
    the file sets it already (a user's own value is kept)."""
    if not client.mcp_wait or (isinstance(data, dict) and client.mcp_wait in data):
        return text
    return f"{client.mcp_wait} = {wait_ms()}  {WAIT_MARK}\n" + text


def _toml_without_wait(client: Harness, text: str) -> str:
    """``text`` without the wait line ``install`` added (one carrying :data:`WAIT_MARK`)."""
    if not client.mcp_wait:
        return text
    return "".join(line for line in text.splitlines(keepends=True)
                   if not (line.lstrip().startswith(client.mcp_wait) and WAIT_MARK in line))


def _toml_without(text: str) -> tuple[str, bool]:
    """``text`` without our ``[mcp_servers.watchkeeper]`` table (and its sub-tables)."""
    out: list[str] = []
    skipping = found = False
    for line in text.splitlines(keepends=True):
        if _TOML_HEADER.match(line):
            skipping = found = True
            continue
        if skipping and _TOML_ANY_HEADER.match(line) and not line.strip().startswith(
                f"[mcp_servers.{NAME}."):
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out), found


def read(client: Harness, path: Path) -> tuple[Any, bytes | None]:
    """``(parsed document, raw bytes)`` of ``path``; ``(None, None)`` when it does not exist.

    Raises:
        ConfigError: unreadable or not valid for its format (one line; never touched).
    """
    from .._errors import ConfigError
    from ..state._fsutil import read_small_file

    if client.mcp_format == "json":
        data = _settings.read_settings(path)
        return data, None if data is None else b""
    raw = read_small_file(path, 4 << 20, what="an MCP configuration file", missing_ok=True)
    if raw is None:
        return None, None
    try:
        text = raw.decode("utf-8")
        if client.mcp_format == "toml":
            import tomllib

            return tomllib.loads(text), raw
        import yaml

        data = yaml.safe_load(text) or {}
    except (UnicodeDecodeError, ValueError, Exception) as err:  # tomllib, yaml errors
        raise ConfigError(f"{path}: cannot parse ({type(err).__name__}: "
                          f"{str(err).splitlines()[0] if str(err) else ''}); left untouched") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level; left untouched")
    return data, raw


def registered(client: Harness, data: Any) -> dict[str, Any] | None:
    """Our entry in a parsed configuration, or None."""
    if not isinstance(data, dict):
        return None
    table = data.get("extensions" if client.mcp_format == "yaml" else
                     "mcp_servers" if client.mcp_format == "toml" else "mcpServers")
    entry = table.get(NAME) if isinstance(table, dict) else None
    return entry if isinstance(entry, dict) else None


def entry_ok(client: Harness, found: dict[str, Any]) -> bool:
    """Whether ``found`` runs ``supervise mcp --for CLIENT`` (and, for a client with a trust
    key, carries it set to true)."""
    command = found.get("cmd" if client.mcp_format == "yaml" else "command")
    trusted = not client.mcp_trust or found.get(client.mcp_trust) is True
    started = not client.mcp_startup or found.get(client.mcp_startup) == entry(client)[client.mcp_startup]
    return (command == COMMAND and found.get("args") == entry_args(client) and trusted
            and started)


def wait_ok(client: Harness, data: Any) -> bool:
    """Whether the client's wait setting (``mcp_wait``) lets our server answer first: absent
    from the harness row, or set to at least :func:`wait_ms`."""
    if not client.mcp_wait:
        return True
    value = data.get(client.mcp_wait) if isinstance(data, dict) else None
    return isinstance(value, int) and not isinstance(value, bool) and value >= wait_ms()


def install(client: Harness, path: Path) -> bool:
    """Merge our entry into ``path`` (created with its folder); False when it was there already.

    Raises:
        ConfigError: the file cannot be parsed or is a link; OSError: cannot be written.
    """
    from ..state._fsutil import atomic_write

    data, raw = read(client, path)
    current = registered(client, data)
    if current is not None and entry_ok(client, current) and (
            wait_ok(client, data) or client.mcp_wait in (data or {})):
        return False
    if client.mcp_format == "json":
        new = dict(data or {})
        servers = new.get("mcpServers")
        servers = dict(servers) if isinstance(servers, dict) else {}
        servers[NAME] = entry(client)
        new["mcpServers"] = servers
        _settings.write_settings(path, new)
        return True
    _refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if client.mcp_format == "toml":
        text, _ = _toml_without((raw or b"").decode("utf-8"))
        if text and not text.endswith("\n"):
            text += "\n"
        text += ("\n" if text.strip() else "") + _toml_block(client)
        text = _toml_wait(client, text, data)
    else:
        import yaml

        new = dict(data or {})
        extensions = new.get("extensions")
        extensions = dict(extensions) if isinstance(extensions, dict) else {}
        extensions[NAME] = {"name": NAME, "type": "stdio", "cmd": COMMAND,
                            "args": entry_args(client), "enabled": True, "timeout": 300}
        new["extensions"] = extensions
        text = yaml.safe_dump(new, sort_keys=False)
    atomic_write(path, text.encode("utf-8"), mode=_mode(path))
    return True


def uninstall(client: Harness, path: Path) -> bool:
    """Remove our entry from ``path`` (a file left empty is removed); False when absent.

    Raises:
        ConfigError: the file cannot be parsed or is a link; OSError: cannot be written.
    """
    from ..state._fsutil import atomic_write

    data, raw = read(client, path)
    if registered(client, data) is None:
        return False
    if client.mcp_format == "json":
        new = dict(data)
        servers = dict(new["mcpServers"])
        del servers[NAME]
        if servers:
            new["mcpServers"] = servers
        else:
            del new["mcpServers"]
        if new:
            _settings.write_settings(path, new)
        else:
            _refuse_link(path)
            path.unlink()
        return True
    _refuse_link(path)
    if client.mcp_format == "toml":
        text, _ = _toml_without((raw or b"").decode("utf-8"))
        text = _toml_without_wait(client, text)
    else:
        import yaml

        new = dict(data)
        extensions = dict(new["extensions"])
        del extensions[NAME]
        new["extensions"] = extensions
        text = yaml.safe_dump(new, sort_keys=False)
    if text.strip():
        atomic_write(path, text.encode("utf-8"), mode=_mode(path))
    else:
        path.unlink()
    return True


def _refuse_link(path: Path) -> None:
    from .._errors import ConfigError
    from ..state._fsutil import link_refusal

    if path.is_symlink():
        raise ConfigError(link_refusal(path, os.readlink(path)))


def _mode(path: Path) -> int | None:
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return None
