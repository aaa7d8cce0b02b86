"""Where an extension bridge lives: Pi and OpenCode load extension files, not hook commands.

A :class:`Bridge` is pure data, declared by ``adapters/pi.py`` and ``adapters/opencode.py``;
placing, removing and checking the files is :mod:`supervisor.bridges._install`'s work.
"""

from __future__ import annotations

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
