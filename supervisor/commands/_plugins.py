"""The harness plugin install: where the plugins are, and the settings key that enables one.

A harness whose adapter names a ``plugin`` (Claude Code: ``watchkeeper@watchkeeper``, the
plugin ``watchkeeper`` of the marketplace ``watchkeeper``, DOC
https://code.claude.com/docs/en/plugins-reference; Gemini CLI: the extension ``watchkeeper``
of the repository's root, DOC google-gemini/gemini-cli ``docs/extensions/``) loads our hooks from
the plugin's own ``hooks/hooks.json`` instead of its settings file. Gemini's extension is
user level (``gemini extensions link``): it is enabled by being there, not by a settings key,
and its hooks carry ``--opt-in`` (it serves only projects that opted in, as a user-scope
install does: :func:`supervisor.session._gates.opt_in_silence`). Those hooks run ``supervise-hook`` found on
``PATH`` (the wheel installs it beside ``supervise``), so a project's settings file holds
only ``"enabledPlugins": {"watchkeeper@watchkeeper": true}``: nothing machine-specific,
safe to commit. The plugin itself is put in the harness's cache once per machine by the
harness's own CLI (``claude plugin marketplace add ROOT``, ``claude plugin install``).

``install HARNESS --plugin`` moves a scope from the settings hooks to the plugin,
``install HARNESS`` moves it back, ``uninstall`` removes either; ``doctor`` reports a plugin
and a plugin beside settings hooks (the digest would arrive twice).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .._harnesses import BY_NAME
from ..adapters import Adapter
from ..adapters._extension import PACKAGES, PROJECT_PACKAGE_FILES, names_package, package_sources

PLUGIN_KEY = "enabledPlugins"
"""The settings key mapping ``plugin@marketplace`` to true/false (Claude Code)."""

CACHE_CAP = 4 << 20
"""Bytes of Claude Code's ``installed_plugins.json`` read at most (a bigger one is named)."""

CLI_TIMEOUT = 120.0
"""Seconds one call of the harness's plugin CLI may take (a local marketplace: about 2 s)."""


def _plugins_root(marker: str) -> Path | None:
    """The first of the installed package's ``supervisor/_plugins/`` (shipped in the wheel)
    and the checkout this package runs from that holds the file ``marker``, or None."""
    package = Path(__file__).resolve().parent.parent
    for root in (package / "_plugins", package.parent):
        if (root / marker).is_file():
            return root
    return None


def marketplace_root() -> Path | None:
    """The folder holding ``.claude-plugin/marketplace.json`` and ``plugins/`` (the Claude
    Code marketplace, the Pi and OpenCode packages); None when this install has none."""
    return _plugins_root(".claude-plugin/marketplace.json")


def gemini_extension_root() -> Path | None:
    """The folder that is our Gemini CLI extension: ``gemini-extension.json`` (the version's
    one home, :mod:`supervisor._version`) and ``hooks/hooks.json``. The repository's root is
    the extension, as ``gemini extensions install <repository URL>`` and the extension
    gallery expect (the manifest at the root); the wheel carries both files in
    ``supervisor/_plugins/``. None when this install has neither."""
    from .._version import MANIFEST

    return _plugins_root(MANIFEST)


def extension_dir(adapter: Adapter, home: Path) -> Path | None:
    """Gemini CLI: the folder of our extension when it is installed or linked
    (``~/.gemini/extensions/watchkeeper/``, which ``gemini extensions link DIR`` makes holding
    ``.gemini-extension-install.json``; 0.61.0), else None; None for other harnesses."""
    if adapter.name != "gemini" or not adapter.plugin:
        return None
    folder = Path(adapter.row.user_folder(str(home)), "extensions", plugin_name(adapter))
    for name in (".gemini-extension-install.json", "gemini-extension.json"):
        if (folder / name).is_file():
            return folder
    return None


def stale_link(folder: Path) -> str:
    """The source a Gemini extension in ``folder`` (:func:`extension_dir`) is linked to when
    that source holds no ``gemini-extension.json`` (moved or removed: a link made to
    ``plugins/gemini`` before the repository's root became the extension), else ``""``.
    Gemini loads nothing from such a link. Never raises."""
    from ..adapters import _settings
    from .._version import MANIFEST

    try:
        record = _settings.read_settings(folder / ".gemini-extension-install.json") or {}
    except Exception:  # noqa: BLE001 - ConfigError: unreadable, not judged here
        return ""
    source = record.get("source") if record.get("type") == "link" else None
    if not isinstance(source, str) or not os.path.isabs(source):
        return ""
    return "" if (Path(source) / MANIFEST).is_file() else source


def extension_session_command(adapter: Adapter, folder: Path) -> str:
    """The session-start command of the Gemini extension installed in ``folder``
    (:func:`extension_dir`): its ``hooks/hooks.json``, in the folder ``gemini extensions link``
    recorded as ``source`` in ``.gemini-extension-install.json`` (0.61.0), else in ``folder``
    (a copied install). ``""`` when no readable hooks file registers one (doctor then judges
    the extension as one that serves every project)."""
    from ..adapters import _settings

    try:
        record = _settings.read_settings(folder / ".gemini-extension-install.json") or {}
        source = record.get("source") if record.get("type") == "link" else None
        root = Path(source) if isinstance(source, str) and os.path.isabs(source) else folder
        hooks = (_settings.read_settings(root / "hooks" / "hooks.json") or {}).get("hooks")
        groups = hooks.get(adapter.session_event) if isinstance(hooks, dict) else None
        for group in groups if isinstance(groups, list) else []:
            for handler in group.get("hooks", []) if isinstance(group, dict) else []:
                command = handler.get("command") if isinstance(handler, dict) else None
                if isinstance(command, str) and "supervise-hook" in command:
                    return command
    except Exception:  # noqa: BLE001 - ConfigError: an unreadable file registers nothing here
        return ""
    return ""


def in_settings(adapter: Adapter) -> bool:
    """Whether the settings file enables our plugin (Claude's ``plugin@marketplace`` key);
    Gemini's extension is enabled by being installed (user level)."""
    return bool(adapter.plugin) and "@" in (adapter.plugin or "")


def plugin_name(adapter: Adapter) -> str:
    """The plugin's own name (``watchkeeper`` of ``watchkeeper@watchkeeper``)."""
    return (adapter.plugin or "").partition("@")[0]


def enabled(data: dict[str, Any] | None, adapter: Adapter) -> list[str]:
    """The keys of ``data[enabledPlugins]`` that enable our plugin (any marketplace the user
    added it from: ``watchkeeper@NAME``); empty when the harness has no plugin."""
    table = (data or {}).get(PLUGIN_KEY)
    if not in_settings(adapter) or not isinstance(table, dict):
        return []
    name = plugin_name(adapter)
    return [key for key, on in table.items()
            if isinstance(key, str) and key.partition("@")[0] == name and on is True]


def enable(data: dict[str, Any], adapter: Adapter) -> dict[str, Any]:
    """``data`` with our plugin enabled (a copy; every other key kept); unchanged for a
    harness whose plugin is not enabled by a settings key."""
    new = copy.deepcopy(data)
    if not in_settings(adapter):
        return new
    table = new.get(PLUGIN_KEY)
    if not isinstance(table, dict):
        table = new[PLUGIN_KEY] = {}
    if not enabled(new, adapter):
        table[adapter.plugin] = True
    return new


def disable(data: dict[str, Any], adapter: Adapter) -> tuple[dict[str, Any], list[str]]:
    """``data`` without the keys that enable our plugin (an emptied table is dropped), and
    those keys."""
    keys = enabled(data, adapter)
    if not keys:
        return data, []
    new = copy.deepcopy(data)
    for key in keys:
        del new[PLUGIN_KEY][key]
    if not new[PLUGIN_KEY]:
        del new[PLUGIN_KEY]
    return new, keys


def cached(adapter: Adapter, home: Path, project: Path, scope: str) -> bool:
    """Whether the harness has the plugin in its cache for ``scope`` (Claude Code's
    ``~/.claude/plugins/installed_plugins.json``: an entry of scope ``user``, or of the
    project's scope with its ``projectPath``). A plugin enabled but not cached does not load
    (observed with 2.1.197: ``claude plugin list`` shows nothing, no hook runs). Gemini:
    :func:`extension_dir`. The file is read guarded (:func:`supervisor.state._fsutil.
    read_small_file`: never blocking on a FIFO, at most :data:`CACHE_CAP` bytes, a regular
    file only); an absent file is False.

    Raises:
        ConfigError: one line naming the file and why it cannot be judged (a FIFO, folder or
            device, too large, unreadable, not JSON or nested too deeply).
    """
    if adapter.name == "gemini":
        return extension_dir(adapter, home) is not None
    from .._errors import ConfigError
    from ..state._fsutil import read_small_file

    path = home / ".claude" / "plugins" / "installed_plugins.json"
    raw = read_small_file(path, CACHE_CAP, what="Claude Code's plugin list", missing_ok=True)
    if raw is None:
        return False
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError, MemoryError) as err:
        raise ConfigError(f"{path}: not valid JSON ({type(err).__name__}); not read") from None
    plugins = data.get("plugins") if isinstance(data, dict) else None
    if not isinstance(plugins, dict):
        return False
    name = plugin_name(adapter)
    for key, installs in plugins.items():
        if not (isinstance(key, str) and key.partition("@")[0] == name and isinstance(installs, list)):
            continue
        for item in installs:
            if not isinstance(item, dict):
                continue
            if item.get("scope") == "user":
                return True
            where = item.get("projectPath")
            if item.get("scope") == scope and isinstance(where, str) and (
                    os.path.realpath(where) == os.path.realpath(project)):
                return True
    return False


def setup_commands(adapter: Adapter, scope: str) -> list[list[str]]:
    """The harness CLI calls that put the plugin in its cache for ``scope`` (empty when the
    marketplace is not found)."""
    if adapter.name == "gemini":  # user level; linked, so it follows upgrades
        extension = gemini_extension_root()
        return [] if extension is None or not adapter.plugin else [
            ["gemini", "extensions", "link", str(extension), "--consent"]]
    root = marketplace_root()
    if root is None or not adapter.plugin:
        return []
    return [["claude", "plugin", "marketplace", "add", str(root)],
            ["claude", "plugin", "install", adapter.plugin, "--scope", scope]]


def run_setup(adapter: Adapter, scope: str, project: Path) -> str:
    """Run :func:`setup_commands` with the harness's CLI found on ``PATH``, in ``project``.

    Returns:
        ``""`` when every call succeeded, else one line saying what failed (or that the CLI
        is not on ``PATH``) and the commands to run by hand.
    """
    import shlex

    from .._home import home_dir

    home = home_dir()
    commands = setup_commands(adapter, scope)
    installed = extension_dir(adapter, Path(home)) if home is not None else None
    if installed is not None:
        if not stale_link(installed) or not commands:
            return ""  # linked already (a second link is refused)
        commands = [["gemini", "extensions", "uninstall", plugin_name(adapter)], *commands]
    shown = " && ".join(shlex.join(c) for c in commands)
    if not commands:
        return ("the Gemini CLI extension (gemini-extension.json) is not in this install"
                if adapter.name == "gemini" else
                "the plugin marketplace (.claude-plugin/marketplace.json) is not in this install")
    cli = shutil.which(commands[0][0])
    if cli is None:
        return f"{commands[0][0]} is not on PATH; on this machine run: {shown}"
    for command in commands:
        try:
            proc = subprocess.run([cli, *command[1:]], cwd=project, capture_output=True,
                                  text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{shlex.join(command)} failed ({err}); run by hand: {shown}"
        if proc.returncode != 0:  # both calls succeed when it is already there
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"{shlex.join(command)} failed ({last[0][:200]}); run by hand: {shown}"
    return ""


def package_uses(harness: str, project: Path, home: Path | None) -> list[tuple[Path, str]]:
    """``(configuration file, source)`` for each place that loads our extension package
    (``plugins/pi``, ``plugins/opencode``): Pi's ``packages`` in ``.pi/settings.json`` and
    ``<agent dir>/settings.json`` (0.73.1: ``pi install SOURCE [-l]`` writes them), OpenCode's
    ``plugin`` in ``opencode.json``, ``.opencode/opencode.json`` and the user's
    ``opencode/opencode.json`` (1.18.33). Unreadable files are skipped (doctor reads, never
    fails on them here)."""
    if harness not in PACKAGES:
        return []
    from ..adapters import _settings

    folder = BY_NAME[harness].user_folder(None if home is None else str(home))
    files = [project / rel for rel in PROJECT_PACKAGE_FILES[harness]]
    if harness == "pi":
        files += [Path(folder, "settings.json")] if folder is not None else []
    else:
        files += [Path(folder, "opencode", "opencode.json")] if folder is not None else []
    out: list[tuple[Path, str]] = []
    for path in files:
        try:
            data = _settings.read_settings(path)
        except Exception:  # noqa: BLE001 - ConfigError: not ours to judge here
            continue
        out += [(path, source) for source in package_sources(harness, data)]
    return out


def package_dir(harness: str) -> Path | None:
    """The folder of our extension package for ``harness`` (``plugins/pi``,
    ``plugins/opencode``) in this install (the wheel's ``supervisor/_plugins/`` or the
    checkout), or None when it is not there."""
    root = marketplace_root()
    if root is None or harness not in PACKAGES:
        return None
    folder = root / PACKAGES[harness][1]
    return folder if (folder / "package.json").is_file() else None


def package_config(harness: str, scope: str, project: Path, home: Path) -> Path:
    """The configuration file whose list loads our package at ``scope`` (``project`` or
    ``user``): Pi's ``.pi/settings.json`` or ``<agent dir>/settings.json`` (``packages``,
    written by ``pi install SOURCE [-l]``), OpenCode's ``opencode.json`` (the project's
    ``opencode.json``, else ``.opencode/opencode.json`` when only that exists) or the user's
    ``opencode/opencode.json`` (``plugin``)."""
    if harness == "pi":
        if scope == "project":
            return project / ".pi" / "settings.json"
        return Path(BY_NAME["pi"].user_folder(str(home)), "settings.json")
    if scope == "project":
        root, inner = project / "opencode.json", project / ".opencode" / "opencode.json"
        return inner if inner.is_file() and not root.exists() else root
    return Path(BY_NAME["opencode"].user_folder(str(home)), "opencode", "opencode.json")


def _uses_at(harness: str, scope: str, project: Path, home: Path) -> list[tuple[Path, str]]:
    """:func:`package_uses` of the configuration files of ``scope``."""
    mine = {package_config(harness, scope, project, home)}
    if harness == "opencode" and scope == "project":
        mine |= {project / "opencode.json", project / ".opencode" / "opencode.json"}
    return [(path, source) for path, source in package_uses(harness, project, home)
            if path in mine]


def add_package(harness: str, scope: str, project: Path, home: Path) -> tuple[str, str]:
    """Make ``harness`` load our package at ``scope``: ``pi install DIR [-l]`` with the ``pi``
    on ``PATH`` (0.73.1 writes the path, relative to the settings file, into ``packages``), or
    our ``file://`` URL added to OpenCode's ``plugin`` list (every other key kept).

    Returns:
        ``(line, problem)``: what happened, and ``""`` or one line saying what failed and
        the command to run by hand.
    """
    folder = package_dir(harness)
    if folder is None:
        return "", f"the {harness} package (plugins/{harness}) is not in this install"
    config = package_config(harness, scope, project, home)
    if _uses_at(harness, scope, project, home):
        return f"{harness}: the package is already loaded from {config} (unchanged)", ""
    if harness == "opencode":
        from ..adapters import _settings

        data = dict(_settings.read_settings(config) or {})
        entries = data.get("plugin")
        data["plugin"] = [*(entries if isinstance(entries, list) else []), folder.as_uri()]
        config.parent.mkdir(parents=True, exist_ok=True)
        _settings.write_settings(config, data)
        return f"{harness}: the package {folder.as_uri()} added to \"plugin\" in {config}", ""
    import shlex

    command = ["pi", "install", str(folder), *(["-l"] if scope == "project" else [])]
    problem = _run_cli(command, project)
    if problem:
        return "", f"{problem}; run by hand: {shlex.join(command)}"
    return f"{harness}: the package {folder} added to \"packages\" in {config} (pi install)", ""


def remove_package(harness: str, scope: str, project: Path, home: Path) -> tuple[list[str], str]:
    """Stop ``harness`` loading our package at ``scope``: each entry naming it removed
    (``pi remove SOURCE [-l]``; from OpenCode's ``plugin`` list, every other key kept, a file
    left empty removed). Returns ``(lines, problem)`` as :func:`add_package`."""
    import shlex

    lines: list[str] = []
    for path, source in _uses_at(harness, scope, project, home):
        if harness == "opencode":
            from ..adapters import _settings

            data = dict(_settings.read_settings(path) or {})
            for key in ("plugin", "plugins"):
                entries = data.get(key)
                if isinstance(entries, list):
                    data[key] = [e for e in entries if not names_package(e, harness)]
                    if not data[key]:
                        del data[key]
            if data:
                _settings.write_settings(path, data)
            else:
                path.unlink()
            lines.append(f"{harness}: the package {source} removed from {path}")
            continue
        target = source if source.startswith("npm:") or os.path.isabs(source) else str(
            (path.parent / source).resolve())
        command = ["pi", "remove", target, *(["-l"] if scope == "project" else [])]
        problem = _run_cli(command, project)
        if problem:
            return lines, f"{problem}; run by hand: {shlex.join(command)}"
        lines.append(f"{harness}: the package {source} removed from {path} (pi remove)")
        _drop_empty_packages(path, project if scope == "project" else None)
    return lines, ""


def _drop_empty_packages(path: Path, project: Path | None) -> None:
    """After ``pi remove``: Pi 0.73.1 leaves ``"packages": []`` in the settings file. Drop
    that key, the file when it held nothing else, and then, at project scope (``project``
    given), its folder (``.pi/``) when now empty. Anything unreadable is left as it is."""
    from .._errors import ConfigError
    from ..adapters import _settings

    try:
        data = _settings.read_settings(path)
    except (ConfigError, OSError):
        return
    if not isinstance(data, dict) or data.get("packages") != []:
        return
    rest = {k: v for k, v in data.items() if k != "packages"}
    try:
        if rest:
            _settings.write_settings(path, rest)
            return
        if path.is_symlink():
            return
        path.unlink()
        if project is not None and path.parent != project:
            path.parent.rmdir()  # only when now empty
    except OSError:
        pass


def _run_cli(command: list[str], project: Path) -> str:
    """Run a harness CLI found on ``PATH`` in ``project``; ``""`` or one line of what failed."""
    import shlex

    cli = shutil.which(command[0])
    if cli is None:
        return f"{command[0]} is not on PATH"
    try:
        proc = subprocess.run([cli, *command[1:]], cwd=project, capture_output=True, text=True,
                              timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{shlex.join(command)} failed ({err})"
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"{shlex.join(command)} failed ({last[0][:200]})"
    return ""
