"""Where an extension bridge lives: Pi and OpenCode load extension files, not hook commands.

A :class:`Bridge` is pure data, declared by ``adapters/pi.py`` and ``adapters/opencode.py``;
placing, removing and checking the files is :mod:`supervisor.bridges._install`'s work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._harnesses import Harness

MARK = "watchkeeper-bridge"
"""Substring of every entry file we place: how uninstall, doctor and the opt-in gate
(:func:`supervisor.session._gates.opt_in_silence`) recognise ours."""
CORE = "core.mjs"
"""The shared extension logic (generations, cap, delivery), copied beside the entry."""
SETTINGS = "watchkeeper.json"
"""Beside ``core.mjs``: the absolute interpreter path and the digest budget in seconds."""


PACKAGES = {"pi": ("pi-watchkeeper", "plugins/pi"),
            "opencode": ("opencode-watchkeeper", "plugins/opencode")}
"""The extension packages of ``plugins/``: bridge harness to (npm name, folder in this
repository): how a harness's configuration names one (``npm:pi-watchkeeper``, a local path)."""

PACKAGE_KEYS = {"pi": ("packages",), "opencode": ("plugin", "plugins")}
"""The keys of a harness's configuration whose list loads packages (Pi 0.73.1 ``packages``,
written by ``pi install``; OpenCode 1.18.33 ``plugin``)."""

PROJECT_PACKAGE_FILES = {"pi": (".pi/settings.json",),
                         "opencode": ("opencode.json", ".opencode/opencode.json")}
"""A project's configuration files, relative to its root, whose :data:`PACKAGE_KEYS` load a
package at project scope (``pi install SOURCE -l``; OpenCode's project ``opencode.json``)."""


def names_package(entry: object, harness: str) -> str:
    """The source string of a configuration entry when it names our package of ``harness``
    (:data:`PACKAGES`), else ``""`` (an entry is a string, ``{"source"|"package": S}`` or
    ``[S, options]``)."""
    if isinstance(entry, dict):
        entry = entry.get("source", entry.get("package"))
    elif isinstance(entry, list) and entry:
        entry = entry[0]
    if not isinstance(entry, str) or harness not in PACKAGES:
        return ""
    npm, folder = PACKAGES[harness]
    plain = entry.rstrip("/")
    return entry if npm in plain or plain.endswith(folder) else ""


def package_sources(harness: str, data: object) -> list[str]:
    """The sources in a parsed configuration ``data`` (``{key: [entry, ...]}``) that load our
    package of ``harness`` (:func:`names_package`, under :data:`PACKAGE_KEYS`)."""
    out: list[str] = []
    for key in PACKAGE_KEYS.get(harness, ()):
        entries = data.get(key) if isinstance(data, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            source = names_package(entry, harness)
            if source:
                out.append(source)
    return out


def project_loads_package(harness: str, folder: str) -> bool:
    """Whether one of ``folder``'s :data:`PROJECT_PACKAGE_FILES` loads our package of
    ``harness``: a project-scope package install, which opts the project in as a placed project
    bridge does (:func:`supervisor.session._gates.opted_in`). Files read capped, never through
    a link or from a FIFO; one that is not JSON loads nothing here (doctor names it)."""
    from .._jsontext import loads
    from ..state._project import read_small

    for rel in PROJECT_PACKAGE_FILES.get(harness, ()):
        text = read_small(os.path.join(folder, rel), 1 << 20)
        if not text.strip():
            continue
        try:
            data = loads(text)
        except (ValueError, RecursionError):
            continue
        if package_sources(harness, data):
            return True
    return False


@dataclass(frozen=True)
class Bridge:
    """Where one harness's bridge lives.

    Attributes:
        row: the harness's row of the harness table (:mod:`supervisor._harnesses`): name,
            label, the entry files per scope and the user folder; the properties read it.
        package_entry: the entry file inside ``supervisor/bridges/`` (``pi/index.ts``).
        core_dir: folder of ``core.mjs`` and ``watchkeeper.json``, relative to the entry's folder.
        next_steps: what the user must know beyond the files.
        caveats: known limits, for ``doctor``.
    """

    row: Harness
    package_entry: str
    core_dir: str
    next_steps: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``pi`` or ``opencode``."""
        return self.row.name

    @property
    def title(self) -> str:
        """The harness's label."""
        return self.row.label

    @property
    def project_entry(self) -> str:
        """Entry path relative to the project root."""
        return self.row.project or ""

    @property
    def user_entry(self) -> str:
        """Entry path relative to the harness's user folder
        (:meth:`supervisor._harnesses.Harness.user_folder`)."""
        return self.row.user

    def entry(self, scope: str, project_dir: Path, home: Path) -> Path:
        """The entry file for ``scope`` (``project`` or ``user``). Raises ValueError otherwise."""
        if scope == "project":
            return project_dir / self.project_entry
        if scope == "user":
            return Path(self.row.user_file(str(home)))
        raise ValueError(f"unknown scope {scope!r} (project or user)")

    def files(self, scope: str, project_dir: Path, home: Path) -> tuple[Path, Path, Path]:
        """``(entry, core.mjs, watchkeeper.json)`` for ``scope``."""
        entry = self.entry(scope, project_dir, home)
        folder = entry.parent / self.core_dir
        return entry, folder / CORE, folder / SETTINGS
