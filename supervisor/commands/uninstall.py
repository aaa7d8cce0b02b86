"""``supervise uninstall HARNESS... [--scope project|user] [--project DIR]``.

Removes only our handlers (recognised by the command, see
:func:`supervisor.adapters._settings.is_ours`) and the key enabling our plugin
(:mod:`supervisor.commands._plugins`) from each harness's settings file; every other key and
hook stays. A settings file left holding nothing is removed. Idempotent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .._errors import ConfigError
from .._exitcodes import EXIT_FAILURE, EXIT_OK
from ..adapters import _settings
from . import _plugins
from .install import _rel, link_refusals, mcp_verb, packages_verb, prepare


def main(argv: list[str]) -> int:
    """Uninstall each named harness; exit 1 if a settings file was refused, 2 on bad usage."""
    from ..bridges._install import run_verb

    request = prepare("uninstall", "remove the watchkeeper hook from harnesses", argv)
    if isinstance(request, int):
        return request
    from .._home import home_dir

    home = Path(home_dir() or "~")  # "~" (refused by link_refusals) when there is no home
    refusals = link_refusals("uninstall", request, home)
    if refusals:
        print("\n".join(refusals), file=sys.stderr)
        return EXIT_FAILURE
    args, adapters, bridged, project_dir = request
    failed = run_verb("uninstall", bridged, args.scope, project_dir)
    if bridged:  # the extension package of plugins/ at that scope too
        failed |= packages_verb("uninstall", bridged, args.scope, project_dir, home)
    if args.mcp:
        failed |= mcp_verb("uninstall", args, project_dir, home)
    for adapter in adapters:
        scope = args.scope if args.scope in adapter.scopes else adapter.scopes[0]
        path = adapter.settings_path(scope, project_dir, home)
        where = _rel(path, project_dir)
        try:
            data = _settings.read_registration(adapter, path)
            if data is None:
                print(f"{adapter.name}: nothing to remove ({where} does not exist)")
                continue
            new, removed = _settings.remove(data, adapter, path)
            new, plugin = _plugins.disable(new, adapter)
            if plugin:
                print(f"{adapter.name}: plugin {', '.join(plugin)} no longer enabled in {where} "
                      f"(`claude plugin uninstall {plugin[0]}` also drops it from the cache)")
            if not removed and not plugin:
                print(f"{adapter.name}: nothing to remove in {where}")
                continue
            if new or adapter.shape == "files":  # files: ours removed, the folder if empty
                _settings.write_registration(adapter, path, new)
            else:
                path.unlink()
                try:  # the harness folder install created (.codex/ ...), only when now empty
                    path.parent.rmdir()
                except OSError:
                    pass
            if removed:
                print(f"{adapter.name}: removed {removed} watchkeeper hook(s) from {where}"
                      + ("" if new else " (the file held nothing else and was removed)"))
            if scope == "local" and not path.exists():  # the exclude line install added for it
                from ..state._project import remove_git_exclude

                if remove_git_exclude(project_dir, "/" + where):
                    print(f"{adapter.name}: removed /{where} from .git/info/exclude")
        except ConfigError as err:
            print(f"supervise uninstall: {adapter.name}: {err}", file=sys.stderr)
            failed = True
        except OSError as err:
            print(f"supervise uninstall: {adapter.name}: {path}: cannot write: {err.strerror or err}",
                  file=sys.stderr)
            failed = True
    return EXIT_FAILURE if failed else EXIT_OK
