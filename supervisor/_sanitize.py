"""Untrusted text loses what could hide an instruction before it reaches the model or a terminal.

Instruction files, memory files and stage output come from the project tree (a cloned
repository, a teammate's commit, a sandboxed agent). A line wrapped in ``ESC[8m … ESC[0m``
("concealed") is invisible in the user's terminal yet reaches the model as an instruction; a
bidirectional override reorders what a reviewer sees (Trojan Source, CVE-2021-42574); Unicode
tag characters render as nothing but are read by language models ("ASCII smuggling"). Issue 11
item 8; brief, hardening.md "Text that hides instructions".

Removed (each counted, one per character removed):

- terminal escape sequences, whole: CSI (``ESC [`` … final byte, and C1 ``U+009B``), OSC, DCS,
  SOS, PM and APC strings up to their terminator (``BEL``, ``ESC \\`` or ``U+009C``: an OSC 52
  clipboard write, an OSC 8 link target), and every other ``ESC`` sequence;
- C0 controls except line feed and tab (so ``BEL``, backspace, a lone carriage return), ``DEL``,
  C1 controls ``U+0080``-``U+009F``;
- bidirectional controls ``U+061C``, ``U+200E``-``U+200F``, ``U+202A``-``U+202E``,
  ``U+2066``-``U+2069``;
- every other character of Unicode's Default_Ignorable_Code_Point set (DerivedCoreProperties.txt;
  :data:`_IGNORABLE`): soft hyphen, ``U+034F``, Hangul fillers ``U+115F``, ``U+1160``,
  ``U+3164``, ``U+FFA0``, ``U+17B4``-``U+17B5``, Mongolian ``U+180B``-``U+180F``, zero-width
  ``U+200B``-``U+200D``, ``U+2060``-``U+206F`` (word joiner, invisible operators among them
  our own nudge mark ``U+2063``: untrusted text cannot forge an operational line; deprecated
  format characters ``U+206A``-``U+206F``), ``U+FEFF`` past the first character,
  ``U+FFF0``-``U+FFF8``, shorthand format controls ``U+1BCA0``-``U+1BCA3``, musical format
  ``U+1D173``-``U+1D17A``, tag characters and variation selectors ``U+E0000``-``U+E0FFF`` (both
  used to smuggle text);
- interlinear annotation controls ``U+FFF9``-``U+FFFB`` (format characters, not ignorable, but
  a renderer may hide the annotation);
- variation selectors ``U+FE00``-``U+FE0F`` (4 bits of smuggled data per character), except
  one text or emoji presentation selector (``U+FE0E``, ``U+FE0F``) right after a visible
  character and not followed by another selector: ``❤️`` keeps its form, a run is removed
  whole. What is left to smuggle is about one bit per visible character.

Not counted: ``CR LF`` becomes ``LF``, the line and paragraph separators ``U+2028``/``U+2029``
become ``LF`` (a line break the model reads is one the terminal shows; nothing is lost), and
a leading byte-order mark is dropped (file-format noise, not hidden text). The visible text
of a concealed span stays: it becomes visible.

:func:`clean` is for whole texts (files, stored results); :class:`StreamCleaner` for output
that arrives in chunks (a sequence split across two reads is still removed whole). Cheap: one
compiled ``re`` search when there is nothing to remove; stdlib only, imported by the stage
programs too. ``re`` itself (with ``enum``) is imported on the first text that
needs a regular expression: text without a character to remove never does (plain ASCII by a
``bytes.translate``, other text by its distinct characters), and the hook paths import neither.
"""

from __future__ import annotations

from functools import cache

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    import re

_C1_STRING = "\x90\x98\x9d\x9e\x9f"  # DCS, SOS, OSC, PM, APC as C1 characters
_SEQUENCE = (
    "\x1b\\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI
    "|\x9b[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI as a C1 character
    f"|(?:\x1b[\\]PX^_]|[{_C1_STRING}])[^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)"  # strings
    "|\x1b[\x20-\x2f]*[\x30-\x7e]"  # nF, Fp, Fe, Fs escapes (ESC c, ESC 7, ESC ( B ...)
)
_IGNORABLE = ("\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
              "\u202a-\u202e\u2060-\u206f\u3164\ufeff\uffa0\ufff0-\ufff8"
              "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff")
"""Unicode's Default_Ignorable_Code_Point set (DerivedCoreProperties.txt, Unicode 16.0; the
stdlib ``unicodedata`` has no such property), less the variation selectors U+FE00-U+FE0F
(:data:`_SELECTORS`): characters a renderer shows as nothing."""
_SELECTORS = "\ufe00-\ufe0f"
_CHARS = f"\x00-\x08\x0b-\x1f\x7f-\x9f{_IGNORABLE}{_SELECTORS}\ufff9-\ufffb"
_KEPT_SELECTOR = f"(?<=[^{_CHARS}\\s])[\ufe0e\ufe0f](?![{_SELECTORS}\U000e0100-\U000e01ef])"
"""One text (U+FE0E) or emoji (U+FE0F) presentation selector right after a visible character
and not followed by another selector: ``❤️`` keeps its colour. Every other selector goes (a run
of them carries 4 bits per character of smuggled data)."""
_PATTERNS = {
    "hidden": f"(?=[{_CHARS}])(?!{_KEPT_SELECTOR})(?:{_SEQUENCE}|[{_CHARS}])",
    "any": f"[{_CHARS}]",
    # the same for ASCII text (``str.isascii`` is O(1)): a short class, a faster scan
    "any_ascii": "[\x00-\x08\x0b-\x1f\x7f]",
    # a character a presentation selector may follow
    "base": f"[^{_CHARS}\\s]",
    # a lone selector at the end of a chunk: kept or not depends on what follows
    "pending": f"(?<![{_SELECTORS}\U000e0100-\U000e01ef])[\ufe0e\ufe0f]\\Z",
    # an escape sequence (or a CR) still open at the end of a chunk
    "partial": ("(?:\x1b(?:\\[[\x30-\x3f]*[\x20-\x2f]*|[\\]PX^_][^\x07\x1b\x9c]*\x1b?|[\x20-\x2f]*)"
                "|\x9b[\x30-\x3f]*[\x20-\x2f]*"
                f"|[{_C1_STRING}][^\x07\x1b\x9c]*\x1b?|\r)\\Z"),
    # every removal starts with one of these characters
    "starts": f"[\x1b\x9b{_C1_STRING}\r]",
    # what :func:`escape` writes as an escape
    "shown": f"[{_CHARS}\u2028\u2029]",
}
"""The sanitiser's regular expressions, compiled on first use (:func:`_rx`): their large
character classes take a while to compile, which plain ASCII text (the common case, see
:func:`_plain`) never needs; the hook paths that only may clean text skip it."""


@cache
def _rx(name: str) -> re.Pattern[str]:
    """The compiled :data:`_PATTERNS` entry ``name`` (once per process)."""
    import re

    return re.compile(_PATTERNS[name])


@cache
def _ranges(shown: bool) -> tuple[tuple[int, int], ...]:
    """The code point ranges of :data:`_CHARS` (a character class of single characters and
    ``a-b`` ranges, no escapes), with U+2028/U+2029 when ``shown`` (:func:`escape`'s class)."""
    chars = _CHARS + ("\u2028\u2029" if shown else "")
    out = []
    i = 0
    while i < len(chars):
        if i + 2 < len(chars) and chars[i + 1] == "-":
            out.append((ord(chars[i]), ord(chars[i + 2])))
            i += 3
        else:
            out.append((ord(chars[i]), ord(chars[i])))
            i += 1
    return tuple(out)


def _has_hidden(text: str, *, shown: bool = False) -> bool:
    """Whether ``text`` holds a character of :data:`_CHARS` (what the ``any`` pattern finds;
    with ``shown``, of the ``shown`` pattern): its distinct characters against the class's
    ranges, so text with none (non-ASCII text without controls: accents, dashes, arrows)
    needs no regular expression and ``re`` is not imported (kept off the hook paths by
    ``tests/test_exports.py``)."""
    ranges = _ranges(shown)
    return any(lo <= code <= hi for code in map(ord, set(text)) for lo, hi in ranges)


_CONTROL_BYTES = bytes([*range(0, 9), *range(11, 32), 127])
_OTHER_BYTES = bytes(b for b in range(256) if b not in _CONTROL_BYTES)
"""Every byte but :data:`_CONTROL_BYTES`: deleting these leaves only the controls, an empty
result for plain text (written nothing, so faster than deleting the controls and comparing
lengths)."""

MAX_HOLD = 4096
"""Characters :class:`StreamCleaner` holds back waiting for the end of a split sequence; an
escape string longer than this is treated as unterminated (its introducer is removed, the rest
passes as visible text)."""


def clean(text: str, *, start: bool = True) -> tuple[str, int]:
    """``(text without hidden characters, how many characters were removed)``.

    Args:
        text: untrusted text (already decoded; invalid UTF-8 is U+FFFD, which stays).
        start: ``text`` is the start of its source: a leading U+FEFF is a byte-order mark and
            is dropped without being counted.

    An escape string without its terminator loses only its introducer (the rest is visible
    text). Never raises.
    """
    return _clean(text, start, "")


def _clean(text: str, start: bool, before: str) -> tuple[str, int]:
    """:func:`clean`, with ``before`` the character that preceded ``text`` in its source (a
    stream's previous chunk): whether a presentation selector at the start is kept."""
    if start and text.startswith("\ufeff"):
        text = text[1:]
    if _plain(text):
        return text, 0
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if "\u2028" in text or "\u2029" in text:  # line and paragraph separators: a line break
        text = text.replace("\u2028", "\n").replace("\u2029", "\n")
    if not _has_hidden(text):
        return text, 0
    first = _rx("any_ascii" if text.isascii() else "any").search(text)
    if first is None:
        return text, 0
    # From one character earlier: it is not removed, and a selector's look-behind sees it.
    at = first.start() - 1
    if at < 0 and before and _rx("base").match(before):
        out = _rx("hidden").sub("", before + text)[1:]
    else:
        at = max(at, 0)
        out = text[:at] + _rx("hidden").sub("", text[at:])
    return out, len(text) - len(out)


def escape(text: str) -> str:
    """``text`` with every character :func:`clean` would remove, and U+2028/U+2029, written as
    its Python escape (``\\x1b``, ``\\u202e``, ``\\U000e0041``) instead: for one-line error
    messages that quote an untrusted value (a stage name, a path), where the user must see what
    is wrong rather than lose it. Selectors after emoji are escaped too. Never raises."""
    if _plain(text) or not _has_hidden(text, shown=True):
        return text
    return _rx("shown").sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def one_line(text: str) -> str:
    """:func:`escape`, and a line feed written ``\\n``: an untrusted value (a path in the project
    tree, a stage name) quoted in one line of text for the model or a terminal can neither
    hide, reorder nor split its line (a folder named ``"x\\nInstructions from: /etc"`` would
    otherwise forge a header). Never raises."""
    return escape(text).replace("\n", "\\n")


MESSAGE_LIMIT = 300
"""Characters of an argument error shown (``supervise status`` with 100,000 stray arguments
printed a 200 KB "unrecognized arguments" line)."""


def well_formed(text: str) -> str:
    """``text`` as valid Unicode, encodable as UTF-8: each lone surrogate (a byte that
    ``surrogateescape`` decoded, a file name that is not UTF-8, half of a pair) becomes
    U+FFFD, the replacement character, as invalid UTF-8 in a stage's output does; a high and
    low surrogate in a row become the one character they encode. ``text`` itself when it is
    valid (the common case: one C-speed check). Never raises."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def short(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` as one readable line: control characters, escape sequences and line breaks
    of the user's arguments written as escapes (:func:`one_line`), and cut to ``limit``
    characters (at least 41), saying how long it was: every verb's argument errors, the
    hook's and nudge's ignored arguments."""
    text = one_line(message)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 40]}... ({len(text)} characters)"


def _plain(text: str) -> bool:
    """True for ASCII text with no control but LF and TAB: a C-speed ``bytes.translate``, no
    regex scan (the common case; docs/benchmarks.md, row "`clean()` of 1 MiB plain ASCII")."""
    if not text.isascii():  # O(1) for str
        return False
    return not text.encode("ascii").translate(None, _OTHER_BYTES)


def removed_note(count: int, source: str) -> str:
    """``[supervise] 3 hidden characters removed from AGENTS.md`` (one line, no newline);
    ``""`` for a count of 0. ``source`` is cleaned too (a file name is untrusted text)."""
    if count <= 0:
        return ""
    name, _ = clean(source)
    noun = "character" if count == 1 else "characters"
    return f"[supervise] {count} hidden {noun} removed from {name}"


class StreamCleaner:
    """:func:`clean` for text that arrives in chunks (a stage's output, read as it streams).

    A sequence split across chunks is held back (at most :data:`MAX_HOLD` characters, and a
    final ``CR`` that may be half of ``CR LF``) until the next chunk or :meth:`finish`.

    Attributes:
        removed: characters removed so far.
    """

    __slots__ = ("_held", "_last", "_started", "removed")

    def __init__(self) -> None:
        self._held = ""
        self._last = ""  # the last character released: may a selector follow it?
        self._started = False
        self.removed = 0

    def plain(self, data: bytes) -> bool:
        """True when ``data`` (raw bytes of the stream) can pass untouched: nothing is held and
        it is ASCII without a control but LF and TAB. Marks the stream as started."""
        if self._held or not data.isascii() or data.translate(None, _OTHER_BYTES):
            return False
        self._started = True
        if data:
            self._last = chr(data[-1])
        return True

    def feed(self, text: str) -> str:
        """The cleaned text that can be released now."""
        if self._held:
            text = self._held + text
            self._held = ""
        elif not text or (self._started and _plain(text)):
            if text:
                self._last = text[-1]
            return text
        tail = max(0, len(text) - MAX_HOLD)
        # The earliest of the last few introducers whose sequence is still open at the end
        # (an OSC's own ESC may be the start of its terminator, so not simply the last one).
        starts = [m.start() for m in _rx("starts").finditer(text, tail)][-8:]
        for cut in starts:
            if _rx("partial").match(text, cut):
                self._held = text[cut:]
                text = text[:cut]
                break
        else:
            if _rx("pending").search(text):
                self._held = text[-1]
                text = text[:-1]
        out, removed = _clean(text, not self._started, self._last)
        if text:
            self._started = True
            self._last = text[-1]
        self.removed += removed
        return out

    def finish(self) -> str:
        """Release what is held (an unterminated sequence loses its introducer)."""
        held, self._held = self._held, ""
        out, removed = _clean(held, not self._started, self._last)
        self.removed += removed
        return out
