"""Path-scoped rules on the read of a matching file (Claude Code ``paths:``, Cursor ``globs:``).

The ``instructions`` stage records, per harness, the path-scoped rules that harness does not
load itself (``stages/instructions/rules.py``, ``write_index``)::

    <state_dir>/rules/<harness>.json
    {"version": 2, "harness": "<harness>", "root": "<project root>",
     "rules": [{"path": "...", "globs": [...], "convention": "cursor"}], "sig": "..."}

The index names the files a read injects, so it is a record replayed into context: it is
used only when it carries our signature under the per-user key
(:mod:`supervisor.state._signing`; a planted or edited index, or one of another harness, is
set aside, never followed). With no home there is no key: no index is written and no rule is
injected on a read.

A read hook (Claude ``PostToolUse``, the Pi bridge's ``tool_result``) asks :func:`matching`
which of them cover the file read; :func:`supervisor.session._nested.handle_post_tool`
injects each once per session and compaction epoch through the nested ledger, its text read
through the same door as a nested ``AGENTS.md`` and stripped of its frontmatter
(:func:`split_frontmatter`). Nothing here parses YAML or imports ``re``: without an index
(no path-scoped rule) a read costs one ``lstat``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath

INDEX_DIR = "rules"
INDEX_VERSION = 2
"""The index's ``version``: 2 is signed (an unsigned version 1 index is set aside)."""
INDEX_CAP = 256 * 1024
"""Bytes of an index read at most; a bigger file is not ours (set aside by the state door)."""


def index_name(harness: str) -> str:
    """The index file of ``harness`` in :data:`INDEX_DIR` (``""``: the terminal's)."""
    return f"{harness or 'terminal'}.json"


def split_frontmatter(text: str) -> tuple[str | None, str]:
    """``(frontmatter or None, body)``: a leading ``---`` line up to the next ``---`` line;
    the frontmatter's text is returned for a YAML parser, never interpreted here."""
    if not text.startswith("---"):
        return None, text
    first, _, rest = text.partition("\n")
    if first.strip() != "---":
        return None, text
    lines = rest.split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "---":
            return "\n".join(lines[:i]), "\n".join(lines[i + 1:]).lstrip("\n")
    return None, text


def check_index(value: object, key: bytes | None, harness: str) -> dict[str, object]:
    """``value`` (an index read back) when it is ours: :data:`INDEX_VERSION`, ``harness``'s,
    signed under ``key`` (:func:`supervisor.state._signing.genuine`), a string ``root`` and a
    list of ``rules``.

    Raises:
        ValueError: any of these fails (the state door then sets the file aside).
    """
    from ..state._signing import genuine

    if not genuine(value, key):
        raise ValueError("not signed by this user's key")
    assert isinstance(value, dict)  # genuine() holds only for a mapping
    if value.get("version") != INDEX_VERSION or value.get("harness") != (harness or "terminal"):
        raise ValueError(f"not an index of {harness or 'terminal'}")
    if not isinstance(value.get("root"), str) or not isinstance(value.get("rules"), list):
        raise ValueError("not a rules index")
    return value


def _covers(glob: str, rel: str) -> bool:
    from ..config._plan import glob_match

    glob = glob.strip().removeprefix("./").strip("/")
    if "/" not in glob:  # a bare name pattern (Cursor's "*.ts") matches at any depth
        glob = f"**/{glob}"
    return glob_match(glob, rel)


def matching(state_dir: StrPath, harness: str, file_path: str) -> dict[str, tuple[str, ...]]:
    """``{rule path: its globs}`` of the rules indexed for ``harness`` in ``state_dir`` whose
    globs cover ``file_path`` (absolute), in index order; ``{}`` without an index, for a file
    outside the project, or when the index cannot be read or is not ours (:func:`check_index`:
    set aside). A rule is read by the caller through the one door, which refuses (and
    names) one that now leads out of the project. Never raises."""
    from .._errors import StateError
    from ..state._signing import user_key
    from ..state._statedir import open_subpath

    folder_path = os.path.join(state_dir, INDEX_DIR, index_name(harness))
    if not os.path.lexists(folder_path):
        return {}
    try:
        folder = open_subpath(state_dir, (INDEX_DIR,))
        if folder is None:
            return {}
        key = user_key(create=False)
        with folder:
            data = folder.read_json(index_name(harness), INDEX_CAP,
                                    lambda value: check_index(value, key, harness))
    except (StateError, OSError):
        return {}
    if data is None:
        return {}
    root, rules = data["root"], data["rules"]
    assert isinstance(root, str) and isinstance(rules, list)
    inside = os.path.realpath(root).rstrip("/") + "/"
    real_file = os.path.realpath(file_path)
    if not real_file.startswith(inside):
        return {}
    rel = real_file[len(inside):]
    out: dict[str, tuple[str, ...]] = {}
    for rule in rules:
        if not isinstance(rule, dict):
            continue
        path, globs = rule.get("path"), rule.get("globs")
        if not isinstance(path, str) or not isinstance(globs, list):
            continue
        shown = tuple(g for g in globs if isinstance(g, str))
        if any(_covers(g, rel) for g in shown):
            out[path] = shown
    return out
