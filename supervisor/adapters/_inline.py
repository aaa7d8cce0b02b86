"""Fit a digest within a harness's inline cap without silently losing anything.

Claude Code replaces hook output over about 10,000 characters with a 2 KB preview (LAB,
``harnesses.md`` section 1), so each adapter has an inline cap. Over the cap the whole digest
is written to a file in the state dir, and the inline text keeps, within the cap: a header
naming the file, the notices and banners, then the stages in declared order; each stage that
does not fit is replaced by one line naming its size and the file.
"""

from __future__ import annotations

import re
from pathlib import Path

from .._hashing import sha256

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from ..state._statedir import StateDir


DIGESTS_DIR = "digests"
"""Sub-folder of the state dir holding whole digests that were over an inline cap."""
KEEP_DIGESTS = 8
"""How many saved digests are kept; older ones are removed when a new one is saved."""

_BANNER_RE = re.compile(r"^.*STARTUP TRUNCATED.*$", re.MULTILINE)
_HEADING_RE = re.compile(r"^## .*$", re.MULTILINE)
_RULE_RE = re.compile(r"^[=\-─━*#]{8,}\s*$")


def _ensure_nl(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def save_full(text: str, state_dir: StrPath) -> Path:
    """Write ``text`` to ``<state_dir>/digests/digest-<sha256[:12]>.txt`` atomically.

    The name is content-addressed, so the same digest saved twice is one file and the inline
    text naming it stays identical. Only the newest :data:`KEEP_DIGESTS` files are kept.

    Returns:
        The absolute path written.

    Raises:
        OSError: the state dir cannot be created or written, or it (or ``digests/``) is a
            symlink: nothing is written through a link (via :mod:`supervisor.state._statedir`).
    """
    from .._errors import StateError
    from .._sanitize import well_formed
    from ..state._statedir import StateDir

    data = well_formed(text).encode("utf-8")
    name = f"digest-{sha256(data).hexdigest()[:12]}.txt"
    try:
        with StateDir.open(Path(state_dir).absolute(), create=True) as state:
            folder = state.sub(DIGESTS_DIR, create=True)
            assert folder is not None
            with folder:
                folder.write(name, data)
                _prune(folder, keep=name)
    except StateError as err:  # a symlinked state dir or digests folder: nothing written
        from ..state._statedir import link_reference

        raise OSError(link_reference(Path(state_dir).absolute()) or str(err)) from err
    return Path(state_dir).absolute() / DIGESTS_DIR / name


def _prune(folder: StateDir, keep: str) -> None:
    """Remove all but the newest :data:`KEEP_DIGESTS` saved digests, in this folder only
    (opened without following links: a planted link never makes us delete elsewhere)."""
    from .._errors import StateError

    try:
        names = folder.names("digest-*.txt")
        stamped = []
        for name in names:
            st = folder.lstat(name)
            if st is not None:
                stamped.append((st.st_mtime, name))
    except StateError:
        return
    for _mtime, old in sorted(stamped, reverse=True)[KEEP_DIGESTS:]:
        if old != keep:
            try:
                folder.remove(old)
            except StateError:
                pass


def _cut_line(name: str, size: int, where: str) -> str:
    return f"[supervise] stage '{name}' ({size:,} characters) is cut from this inline digest: read it in {where}\n"


def fit_inline(parts: list[tuple[str, str]], cap: int, state_dir: StrPath, notices: str = "") -> str:
    """Return the digest text to print inline, at most ``cap`` characters.

    Args:
        parts: ``(stage name, stage text)`` in declared order (empty texts are skipped).
        cap: the harness's inline cap in characters.
        state_dir: where the whole digest is saved when it is over the cap.
        notices: notices and banners (read-only notice, truncation banner); kept first.

    Returns:
        The whole digest unchanged when it fits (notices first, then the parts); otherwise a
        header naming the saved file, the notices, the stages that fit whole, and one line per
        cut stage naming its size and the file. Never raises: if the file cannot be written the
        lines say so and name ``supervise digest`` instead.
        (:class:`supervisor.adapters._spill.Spill` does the same for a digest as it streams,
        holding none of it whole.)
    """
    parts = [(name, text) for name, text in parts if text]
    full = "".join(_ensure_nl(t) for t in (notices, *(t for _, t in parts)) if t)
    if len(full) <= cap:
        return full
    try:
        where = str(save_full(full, state_dir))
        saved = f"the whole digest is in {where}"
    except OSError as err:
        where, saved = _unsaved(err.strerror or str(err))
    return _fitted(len(full), [(name, len(_ensure_nl(text)), _ensure_nl(text))
                               for name, text in parts], cap, notices, where, saved)


def _unsaved(why: str) -> tuple[str, str]:
    """``(where, saved)`` of :func:`_fitted` for a digest that could not be saved."""
    return ("the output of `supervise digest`",
            f"it could not be saved ({why}); run `supervise digest` to see it all")


def _fitted(size: int, parts: list[tuple[str, int, str | None]], cap: int, notices: str,
            where: str, saved: str) -> str:
    """The inline text of a digest of ``size`` characters over ``cap``: ``parts`` are ``(stage
    name, characters of its text with its final line break, that text or None when it is
    over ``cap``)`` of each stage that printed something; ``where`` names the saved digest
    (or how to see it) and ``saved`` says so in the header."""
    header = (f"[supervise] This digest is {size:,} characters, over the {cap:,}-character "
              f"inline limit; {saved}. Stages cut below name their size.\n")
    cuts = [_cut_line(name, length, where) for name, length, _text in parts]
    fixed = len(header) + sum(len(c) for c in cuts)
    if fixed > cap:
        # Too many stages to name one per line: one line for all of them.
        names = ", ".join(name for name, _length, _text in parts)
        line = f"[supervise] stages cut from this inline digest ({names}): read {where}\n"
        room = cap - len(header) - len(line)
        return _keep_pointer(header, _ensure_nl(notices)[: max(room, 0)] + line, cap, where)
    notes = _ensure_nl(notices)
    if fixed + len(notes) > cap:
        tail = f"... [notices cut: read {where}]\n"
        room = max(0, cap - fixed - len(tail))
        notes = notes[:room] + tail if room else ""
    out = [header, notes]
    used = fixed + len(notes)  # every cut line is reserved up front
    for (name, length, text), cut in zip(parts, cuts):
        if text is not None and used - len(cut) + length <= cap:
            out.append(text)
            used += length - len(cut)
        else:
            out.append(cut)
    return "".join(out)


def fit_prefix(text: str, cap: int, state_dir: StrPath, notices: str = "") -> str:
    """Like :func:`fit_inline` for a digest with no stage boundaries known: keep the notices
    and as many whole lines of ``text`` as fit, then one line naming the size of the rest and
    the file holding the whole digest. At most ``cap`` characters; never raises."""
    full = "".join(_ensure_nl(t) for t in (notices, text) if t)
    if len(full) <= cap:
        return full
    try:
        where = str(save_full(full, state_dir))
    except OSError as err:
        where = f"the output of `supervise digest` (saving failed: {err.strerror or err})"
    header = (f"[supervise] This digest is {len(full):,} characters, over the {cap:,}-character "
              f"inline limit; the whole digest is in {where}.\n")
    notes = _ensure_nl(notices)
    tail_len = len(_cut_rest(len(text), where))
    if len(header) + len(notes) + tail_len > cap:
        notes = notes[: max(0, cap - len(header) - tail_len - 40)] + "... [notices cut]\n"
    room = cap - len(header) - len(notes) - tail_len
    keep = text[: max(room, 0)]
    if "\n" in keep and len(keep) < len(text):
        keep = keep[: keep.rindex("\n") + 1]
    return _keep_pointer(header, notes + keep + _cut_rest(len(text) - len(keep), where), cap,
                         where)


def _keep_pointer(header: str, rest: str, cap: int, where: str) -> str:
    """``header + rest`` cut to ``cap`` characters without ever cutting the pointer to the saved
    digest: ``rest`` goes first, then the header gives way to a short pointer line, which is
    kept whole even past ``cap`` (a pointer cut in half is worse than a few characters over)."""
    if len(header) + len(rest) <= cap:
        return header + rest
    if len(header) <= cap:
        return header
    return f"[supervise] digest over the inline limit: read it in {where}\n"


def _cut_rest(size: int, where: str) -> str:
    return f"\n[supervise] the rest of the digest ({size:,} characters) is cut from this inline text: read it in {where}\n"


def split_sections(text: str) -> tuple[list[tuple[str, str]], str]:
    """Split a printed digest into ``(parts, notices)`` for :func:`fit_inline`.

    Used when only the digest text is known (not the engine's per-stage results): a section
    starts at a ``## Title`` line (the stage contract's heading); text before the first heading
    and a trailing ``STARTUP TRUNCATED`` banner (with the rule line above it) are notices.
    """
    notices = []
    banner = _BANNER_RE.search(text)
    if banner:
        start = banner.start()
        before = text[:start].rstrip("\n").rsplit("\n", 1)
        if len(before) == 2 and _RULE_RE.match(before[1]):
            start = len(before[0]) + 1
        elif len(before) == 1 and _RULE_RE.match(before[0]):
            start = 0
        text, banner_text = text[:start], text[start:]
    else:
        banner_text = ""
    heads = list(_HEADING_RE.finditer(text))
    lead = text[: heads[0].start()] if heads else text
    parts: list[tuple[str, str]] = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        parts.append((m.group(0)[3:].strip() or f"section {i + 1}", text[m.start():end]))
    if not heads and lead.strip():
        parts, lead = [("digest", lead)], ""
    if banner_text.strip():
        notices.append(_ensure_nl(banner_text))
    if lead.strip():
        notices.append(_ensure_nl(lead))
    return parts, "".join(notices)
