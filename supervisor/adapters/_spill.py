"""A digest fitted to a harness's inline cap as it streams (the hook's frame for the engine).

Kept apart from :mod:`supervisor.adapters._inline` (the fit of a digest already whole, the
saved file's name and folder), which this module loads only once a digest is over the cap:
a session start whose digest fits imports neither ``re`` nor ``pathlib`` for it.
"""

from __future__ import annotations

import os

from .._hashing import sha256

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Sequence

    from _typeshed import StrPath
    from ..state._statedir import StateDir


class Spill:
    """A digest fitted to an inline cap as it streams: the hook's ``frame`` for the engine
    (:class:`supervisor.engine._output.Frame`), so a stage may print far more than memory
    holds. Until the digest is over ``cap`` characters it is kept as printed; from then on
    it goes, as printed, to the file that holds the whole digest (under
    ``<state_dir>/digests/``, hashed as written and named by its content at :meth:`close`,
    as :func:`save_full` names one), and memory keeps only the notices and, of each stage,
    its text while it could still be shown inline (``cap`` characters), else its size.

    :meth:`close` gives the text to print, as :func:`fit_inline` gives it: the digest itself
    when it fits, else the header naming the file, the notices, the stages that fit and one
    line per cut stage. Never raises: a file that cannot be written is named as unsaved.

    Args:
        state_dir: the state dir (created when the digest must be saved).
        cap: the inline cap in characters.
        notice: text printed first (the hook's own notice), a notice of the fit.
        cut_note: a line put first when the digest is cut, within ``cap`` (the MCP server
            names its ``digest`` tool).
    """

    def __init__(self, state_dir: StrPath, cap: int, notice: str = "",
                 cut_note: str = "") -> None:
        self._state_dir, self._cap, self._cut_note = state_dir, cap, cut_note
        self._buffer: list[bytes] = []  # the digest as printed, until the file is opened
        self._chars = 0  # characters of the digest so far
        self._notices: list[str] = []
        self._names: list[str] = []  # the live stages, in declared order
        self._texts: list[list[bytes] | None] = []  # each one's text while it may fit
        self._sizes: list[int] = []
        self._ends_line: list[bool] = []
        self._folder: StateDir | None = None
        self._fd: int | None = None
        self._tmp = ""
        self._hash = sha256()
        self._error: str | None = None
        self.text: str | None = None
        """What :meth:`close` returned, None before."""
        if notice:
            self.note(notice)

    def note(self, text: str) -> None:
        """A notice in the digest's flow (the READ-ONLY notice before the stages, the
        completion line after them), on its own line."""
        from .._sanitize import well_formed

        text = text if text.endswith("\n") else text + "\n"
        self.write(well_formed(text).encode("utf-8"))

    # -- the engine's frame --------------------------------------------------------------
    def begin(self, layout: Sequence[tuple[str, str | None]]) -> None:
        """The stages in declared order; those run live (status None) are this digest's."""
        self._names = [name for name, status in layout if status is None]
        self._texts = [[] for _ in self._names]
        self._sizes = [0] * len(self._names)
        self._ends_line = [True] * len(self._names)

    def write(self, data: bytes) -> None:
        """A notice (valid UTF-8) outside any stage: printed, and kept for the inline text."""
        text = data.decode("utf-8", "replace")
        self._notices.append(text[1:] if text.startswith("\n") else text)
        self._add(data, len(text))

    def stage(self, index: int, data: bytes, plain: bool = False) -> None:
        """Bytes (valid UTF-8) of live stage ``index``: printed; kept while the stage may fit."""
        count = len(data) if plain or data.isascii() else len(data.decode("utf-8", "replace"))
        self._add(data, count)
        self._sizes[index] += count
        self._ends_line[index] = data.endswith(b"\n")
        kept = self._texts[index]
        if kept is not None:
            if self._sizes[index] >= self._cap:  # never shown inline: its size is enough
                self._texts[index] = None
            else:
                kept.append(data)

    def end(self, index: int, summary: object, cut: bool) -> None:
        """Stage ``index`` has shown everything (nothing to do: its text is counted)."""

    # -- the digest as printed -------------------------------------------------------------
    def _add(self, data: bytes, count: int) -> None:
        self._chars += count
        if self._error is not None:
            return
        if self._fd is None:
            self._buffer.append(data)
            if self._chars > self._cap:
                self._open()
            return
        self._put(data)

    def _open(self) -> None:
        """Start the file: what was kept so far goes first."""
        from .._errors import StateError
        from ..state._statedir import StateDir, link_reference
        from ._inline import DIGESTS_DIR

        path = os.path.abspath(self._state_dir)
        try:
            with StateDir.open(path, create=True) as state:
                self._folder = state.sub(DIGESTS_DIR, create=True)
            assert self._folder is not None
            self._fd, self._tmp = self._folder.temp_file("digest")
        except StateError as err:  # a symlinked state dir or digests folder: nothing written
            self._fail(link_reference(path) or str(err))
            return
        buffered, self._buffer = self._buffer, []
        for piece in buffered:
            self._put(piece)

    def _put(self, data: bytes) -> None:
        assert self._fd is not None
        self._hash.update(data)
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as err:  # ENOSPC, EFBIG, EIO: the digest cannot be saved whole
            self._fail(err.strerror or str(err))

    def _fail(self, why: str) -> None:
        self._error = why
        self._buffer = []
        self._discard()

    def _discard(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._folder is not None:
            from .._errors import StateError

            try:
                if self._tmp:
                    self._folder.remove(self._tmp)
            except StateError:
                pass
            self._folder.close()
            self._folder = None

    def close(self) -> str:
        """The text to print inline (at most ``cap`` characters but for the pointer line,
        as :func:`fit_inline`); the file, when the digest was over the cap, put in place
        under its content's name (older saved digests pruned). A second call returns the
        same text."""
        if self.text is not None:
            return self.text
        if self._fd is None and self._error is None:  # it fits: the digest as printed
            self.text = b"".join(self._buffer).decode("utf-8", "replace")
            self._buffer = []
            return self.text
        from ._inline import DIGESTS_DIR, _ensure_nl, _fitted, _prune, _unsaved

        where, saved = _unsaved(self._error or "")
        if self._error is None:
            from .._errors import StateError

            assert self._folder is not None and self._fd is not None
            name = f"digest-{self._hash.hexdigest()[:12]}.txt"
            try:
                os.close(self._fd)
                self._fd = None
                if self._folder.rename(self._tmp, name):
                    self._tmp = ""
                    _prune(self._folder, keep=name)
                    where = os.path.join(os.path.abspath(self._state_dir), DIGESTS_DIR, name)
                    saved = f"the whole digest is in {where}"
                else:
                    where, saved = _unsaved("it was removed while it was written")
            except (OSError, StateError) as err:
                where, saved = _unsaved(getattr(err, "strerror", None) or str(err))
        self._discard()
        parts = [(name, size + (not ends), None if kept is None
                  else _ensure_nl(b"".join(kept).decode("utf-8", "replace")))
                 for name, size, ends, kept in zip(self._names, self._sizes, self._ends_line,
                                                   self._texts) if size]
        self.text = self._cut_note + _fitted(self._chars, parts, self._cap - len(self._cut_note),
                                             "".join(self._notices), where, saved)
        return self.text
