"""The ``.remember/``-style memory store: its one list of files, rotated slices, staging days.

Layout (after the claude-remember plugin, brief memory.md 1.1)::

    <store>/identity.md            persona; presence-required (injected in full, even at compact)
    <store>/core-memories.md       user-curated key moments; never dropped for the budget
    <store>/today-YYYY-MM-DD.md    daily staging; only today's is injected
    <store>/now.md                 session buffer
    <store>/recent.md              last days, one entry per day
    <store>/archive.md             weekly paragraphs
    <store>/archive-YYYY-MM-DD[-N].md, recent-YYYY-MM-DD[-N].md
                                   rotated slices: never injected, only listed
    <store>/remember.md            the handoff note (name configurable)
    <store>/today-YYYY-MM-DD.done.md   a staging day already consolidated

:data:`MEMORY_FILES` is the single list every part of the stage uses, so a new file cannot be
added to one loop and missed by another (the lesson of the claude-remember compact fix).
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from pathlib import Path

# (key, file name pattern): {today} is today's local date. Order = injection order.
MEMORY_FILES: tuple[tuple[str, str], ...] = (
    ("identity", "identity.md"),
    ("core", "core-memories.md"),
    ("today", "today-{today}.md"),
    ("now", "now.md"),
    ("recent", "recent.md"),
    ("archive", "archive.md"),
)
PROTECTED = frozenset({"identity", "core"})
"""Never dropped for the budget (identity is also presence-required at compact)."""
DROP_ORDER: tuple[str, ...] = ("archive", "today", "recent", "now")
"""Bodies left out, in this order, until the stage output fits its byte budget."""

_SLICE = re.compile(r"^(archive|recent)-(\d{4})-(\d{1,2})-(\d{1,2})(?:-(\d{1,4}))?\.md$")
_STAGING = re.compile(r"^today-(\d{4})-(\d{2})-(\d{2})\.md$")


@dataclass(frozen=True)
class Slice:
    """A rotated archive slice; ``date`` and ``seq`` come from its NAME (not mtime)."""

    path: Path
    kind: str
    date: _dt.date
    seq: int
    size: int

    @property
    def order(self) -> tuple[_dt.date, int, str]:
        """Sort key, oldest first: date, then sequence (no suffix = 0), then kind."""
        return (self.date, self.seq, self.kind)


def memory_paths(store: Path, today: _dt.date) -> list[tuple[str, Path]]:
    """``(key, path)`` for each file of :data:`MEMORY_FILES`, in injection order."""
    stamp = today.isoformat()
    return [(key, store / pattern.format(today=stamp)) for key, pattern in MEMORY_FILES]


def _parse_date(y: str, m: str, d: str) -> _dt.date | None:
    try:
        return _dt.date(int(y), int(m), int(d))
    except ValueError:
        return None


def rotated_slices(store: Path) -> list[Slice]:
    """Every rotated slice in ``store``, newest first, ordered by the date and the sequence
    number encoded in the name: ``archive-2026-9-30.md`` is older than ``archive-2026-10-01.md``
    and ``-10`` is newer than ``-9`` although both sort the other way as text. Names whose date
    is impossible are not slices. Sizes are ``lstat`` sizes in bytes; nothing is read."""
    found: list[Slice] = []
    try:
        entries = list(store.iterdir())
    except OSError:
        return []
    for path in entries:
        m = _SLICE.match(path.name)
        if not m:
            continue
        date = _parse_date(m[2], m[3], m[4])
        if date is None:
            continue
        try:
            size = path.lstat().st_size
        except OSError:
            continue
        found.append(Slice(path=path, kind=m[1], date=date, seq=int(m[5] or 0), size=size))
    found.sort(key=lambda s: s.order, reverse=True)
    return found


def pending_staging(store: Path, today: _dt.date) -> list[Path]:
    """Past-day staging files not yet consolidated (``today-<date>.md`` with a date before
    ``today``; ``*.done.md`` are processed), oldest first."""
    pending: list[tuple[_dt.date, Path]] = []
    try:
        entries = list(store.iterdir())
    except OSError:
        return []
    for path in entries:
        m = _STAGING.match(path.name)
        if not m:
            continue
        date = _parse_date(m[1], m[2], m[3])
        if date is not None and date < today and path.is_file():
            pending.append((date, path))
    return [p for _, p in sorted(pending)]


def slice_globs(store: Path, rest: list[Slice]) -> str:
    """The glob(s) that name the slices not listed, e.g. ``<store>/archive-*.md``."""
    kinds = sorted({s.kind for s in rest})
    return ", ".join(str(store / f"{kind}-*.md") for kind in kinds)
