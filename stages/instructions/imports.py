"""``@path`` imports in instruction files, the way Claude Code expands them in CLAUDE.md.

Rules (Claude Code memory docs, "Import additional files"): an import is ``@`` followed by a
path, at the start of a line or after whitespace; the path is relative to the importing file,
``@~/...`` is relative to the home directory, absolute paths are allowed; imports nest up to a
hop limit (5 by default); imports inside code spans and fenced code blocks are not expanded;
cycles are broken. Claude asks before following an import outside the project; this stage does
not follow one at all unless the ``allow_outside`` / ``allow_paths`` options say so.

To keep ``@mentions`` in prose from being reported as missing files, a token counts as an import
only when it looks like a path: it contains ``/`` or ``.``, or starts with ``~``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from instructions.files import ANYWHERE, FileText, real
from supervisor.state._intake import Refused, Scope, identity, read_text
from supervisor._record import field, mutable_record, record

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_IMPORT = re.compile(r"(?:(?<=\s)|^)@((?:\\ |[^\s])+)")
_TRAILING = ".,;:!?)]}'\""


def strip_code(text: str) -> str:
    """``text`` with fenced code blocks and inline code spans blanked out (lines kept)."""
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if fence is not None:
            # A closing fence: same character, at least as long, nothing else on the line.
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip().lstrip(fence[0]):
                fence = None
            out.append("")
            continue
        if m and not (m.group(1)[0] == "`" and "`" in line.strip()[len(m.group(1)):]):
            fence = m.group(1)
            out.append("")
            continue
        out.append(_strip_spans(line))
    return "\n".join(out)


def _strip_spans(line: str) -> str:
    """One line with each inline code span (a backtick run to the next run of equal length)
    replaced by a space; an unmatched run stays literal (CommonMark)."""
    out: list[str] = []
    i = 0
    while i < len(line):
        if line[i] != "`":
            out.append(line[i])
            i += 1
            continue
        j = i
        while j < len(line) and line[j] == "`":
            j += 1
        closing = re.compile(r"(?<!`)`{%d}(?!`)" % (j - i)).search(line, j)
        if closing:
            out.append(" ")
            i = closing.end()
        else:
            out.append(line[i:j])
            i = j
    return "".join(out)


def import_tokens(text: str) -> list[str]:
    """The import paths of ``text`` in order of appearance, each once (``\\ `` is a space)."""
    seen: dict[str, None] = {}
    for m in _IMPORT.finditer(strip_code(text)):
        token = m.group(1).replace("\\ ", " ")
        if token.startswith("~") or "/" in token or "." in token.rstrip(_TRAILING):
            seen.setdefault(token, None)
    return list(seen)


def resolve_token(token: str, importer: Path, home: Path) -> tuple[str, Path]:
    """``(token, path)``: where ``token`` points: ``~/x`` under ``home``, absolute as is, else
    beside ``importer``. Trailing punctuation (``.,;:)`` ...) is dropped unless the path with
    it exists ("see @README.md." imports README.md); the token returned is the one used.
    """
    def place(t: str) -> Path:
        if t == "~" or t.startswith("~/"):
            return home / t[2:]
        p = Path(t)
        return p if p.is_absolute() else importer.parent / p

    target = place(token)
    stripped = token.rstrip(_TRAILING)
    if stripped and stripped != token and not os.path.lexists(target):
        return stripped, place(stripped)
    return token, target


@record
class Entry:
    """One instruction file to emit, in order.

    Attributes:
        path: absolute path as discovered (not resolved), for display.
        real: its real path (what the refresh baseline records).
        content: the file as read (its ``ident``, ``(st_dev, st_ino)``, is the dedup key).
        importer: the file that imported it, or None for a discovered file.
    """

    path: Path
    real: str
    content: FileText
    importer: Path | None = None


@record
class Skipped:
    """A file or import not followed: ``what`` (display text), ``reason``, ``path``."""

    what: str
    reason: str
    path: Path | None = None


@mutable_record
class Walk:
    """Depth-first expansion of discovered files and their imports, every file read through
    the one door (:func:`supervisor.state._intake.read_text`).

    Args:
        known: identities ``(st_dev, st_ino)`` of the files the harness loads itself: never
            emitted (a hard link of one is the same file); traversed for imports only when
            ``follow_known`` (False when the harness expands imports itself).
        imports: expand ``@path`` imports at all.
        max_depth: hop limit; a file reached through more hops than this is not read.
        scope: where a discovered project file or an import may lead (the project, the main
            checkout of a linked worktree, ``allow_paths``; anywhere with ``allow_outside``).
        home: the home directory for ``@~/`` imports.
    """

    known: set[tuple[int, int]]
    imports: bool
    max_depth: int
    scope: Scope
    home: Path
    follow_known: bool = True
    entries: list[Entry] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    _traversed: set[str] = field(default_factory=set)
    _emitted: set[tuple[int, int]] = field(default_factory=set)

    def visit(self, path: Path, *, emit: bool = True, importer: Path | None = None,
              depth: int = 0, trusted: bool = False, what: str = "") -> None:
        """Visit ``path`` (emitting it unless known or already emitted), then its imports.

        A discovered file (``importer`` None) must resolve inside :attr:`scope` like an import,
        unless ``trusted``: the harness's own documented locations in the user's home
        (``~/.claude/CLAUDE.md``, Codex's global AGENTS.md) and the files the config names,
        which may link anywhere but into ``/proc``, ``/sys`` or ``/dev`` (issue 11 item 7:
        ``ln -s /etc/passwd AGENTS.md`` put the password file in the model's context). A file
        the harness loads itself is read for its imports wherever it is. ``what``: how a
        refusal names an import (``@token``, listed with its importer).
        """
        key = real(path)
        if key in self._traversed:
            return  # a cycle or a second route: each file once
        self._traversed.add(key)
        ident = identity(path)
        known = ident is not None and ident in self.known
        scope = ANYWHERE if (trusted or known or not emit) else self.scope
        content = read_text(path, scope)
        if isinstance(content, Refused):
            if emit and not known:
                reason = (f"not found ({path})" if importer is not None and content.kind == "missing"
                          else content.reason)
                self.skipped.append(Skipped(what or str(path), reason,
                                            importer if what else path))
            return
        known = content.ident in self.known
        if emit and not known and content.ident not in self._emitted and content.text.strip():
            self._emitted.add(content.ident)
            self.entries.append(Entry(path, content.real, content, importer))
        if not self.imports or (known and not self.follow_known):
            return
        for token in import_tokens(content.text):
            token, target = resolve_token(token, path, self.home)
            what = f"@{token}"
            if not os.path.lexists(target):
                self.skipped.append(Skipped(what, f"not found ({target})", path))
                continue
            if real(target) in self._traversed:
                continue
            if depth + 1 > self.max_depth:
                self.skipped.append(Skipped(what, f"hop limit {self.max_depth} reached", path))
                continue
            self.visit(target, emit=True, importer=path, depth=depth + 1, what=what)
