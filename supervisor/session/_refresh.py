"""Changed instructions refreshed: a long session must not work from stale rules.

When a session starts (or re-emits), the ``instructions`` stage records a **baseline** for
that session: every instruction file the session now has (the ones the digest injected, and
the ones the harness loads by itself, e.g. ``CLAUDE.md`` for Claude Code, ``AGENTS.md`` for
Codex) with the SHA-256 of its content and, within bounds, the content itself
(:func:`record_baseline`). The baseline lives in ``<state>/refresh/<session key>.json``; the
key is a checksum of the session id (the id itself is never a path part).

At the next per-prompt hook (Claude ``UserPromptSubmit``, Codex, Gemini ``BeforeAgent``, the
Pi and OpenCode bridges' per-turn ask), :func:`take_changed` judges those files again: a file
whose **stamp** (:func:`stamp_of`: its real path and the ``lstat`` and ``stat`` identity,
size, mtime and ctime, recorded with its hash and signed with the baseline) is the one
recorded is unchanged without a read; any other is read through the one door and hashed
again (a 3 GiB file used to cost an 8 MiB read and hash at every prompt). A file whose hash
differs is injected **once**, whole, under a one-line note of what changed (lines
added and removed, the first changed line), and the baseline moves to the new hash; a
deleted file gets one line saying so. An unchanged file is never re-injected. Concurrent
prompt hooks of one session inject once: a ``flock`` around the compare-and-update, and,
while a hook's envelope is on its way (the baseline moves only once it went out, issue 11),
an ``in_flight`` mark on the entry (:func:`supervisor.state._delivery.in_flight`, with the
hash being delivered) that a parallel hook honours while its holder lives.

The per-event fast path (``supervisor/hook-fast.sh``) answers "nothing to do" without Python
unless a watched file is missing, replaced by a link, or has a ctime at or after the watch
list's stamp (:func:`supervisor.session._fastpath.set_watch`):
every baseline's files are on that list, each with its ctime (or its absence) as seen before
the baselines were compared, except a file that some session's baseline holds a stale hash
of: that one gets no record, so the fast path runs Python until the session took its change.
One session's start or refresh thus never hides a change from another. Without a watch list
(it could not be written), the fast path runs Python whenever baselines exist.
"""

from __future__ import annotations

import os
import stat
import time
import zlib
from collections.abc import Iterable

from .._errors import StateError
from ..state._intake import Refused, Scope, project_scope, read
from ..state._project import pure_path

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from typing import Any
    from ..state._delivery import Delivery

REFRESH_DIR = "refresh"
"""The folder of the per-session baselines in the state dir."""
FILE_CAP = 64 * 1024
"""Bytes of one instruction file a refresh injects (and keeps as its baseline text) at most."""
HASH_CAP = 8 * 1024 * 1024
"""Bytes of one file hashed at most (a bigger file is compared by its first 8 MiB)."""
MAX_FILES = 64
"""Files one baseline holds at most."""
TEXT_BUDGET = 512 * 1024
"""Bytes of baseline text one session keeps (line counts for the note); past it, hashes only."""
BASELINE_CAP = TEXT_BUDGET * 2 + 256 * 1024
"""Bytes a baseline file may have when read back (bigger is not ours: set aside)."""
KEEP_DAYS = 7.0
"""Baselines untouched for this many days are removed (sessions long gone)."""
_USER = Scope((), anywhere=True)


def session_key(session_id: str) -> str:
    """A short stable file name for ``session_id`` (checksums, not the id: never a path part)."""
    raw = session_id.encode("utf-8", "surrogateescape")
    return f"{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}"


def scope_for(entry: dict[str, Any], project: Scope) -> Scope:
    """Where baseline ``entry``'s file may lead: anywhere but ``/proc``, ``/sys``, ``/dev``
    for a user file (``"user": true``: a home file the harness documents, a file the config
    names or allows outside the project, as the instructions stage judged it), else inside
    ``project`` (:func:`supervisor.state._intake.project_scope` of the hook's own project,
    never a root taken from the record)."""
    return _USER if entry.get("user") is True else project


def stamp_of(path: str, now_ns: int) -> list[object] | None:
    """What says ``path`` is unchanged without reading it: its real path, then ``(st_dev,
    st_ino, st_mode, st_size, st_mtime_ns, st_ctime_ns)`` of its ``lstat`` and of its
    ``stat``; None when it is gone, not a regular file, or its ctime is within
    :data:`supervisor.session._fastpath.MTIME_SLACK` of ``now_ns`` (the moment the stamp is
    taken, before the file is read: a write within the file system's timestamp granularity
    of an earlier one could keep every field, so such a file is hashed until it settles).
    A write changes the ctime, a link swapped in the lstat, a folder swapped for a link the
    real path. Never raises."""
    from ._fastpath import MTIME_SLACK

    try:
        real = os.path.realpath(path)
        near, far = os.lstat(path), os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(far.st_mode) or max(near.st_ctime_ns, far.st_ctime_ns) \
            >= now_ns - int(MTIME_SLACK * 1e9):
        return None
    return [real, *(int(v) for st in (near, far) for v in (st.st_dev, st.st_ino, st.st_mode,
                                                           st.st_size, st.st_mtime_ns,
                                                           st.st_ctime_ns))]


def judged(entry: dict[str, Any], project: Scope, now_ns: int
           ) -> tuple[str | None, tuple[str, bytes] | Refused | None, list[object] | None]:
    """``(sha, found, stamp)`` of baseline ``entry``'s file now: with the stamp it recorded
    (:func:`stamp_of`), its recorded sha and ``found`` None, unread; else
    :func:`read_entry`'s result and its sha, with the stamp taken before that read (None
    when not yet settled)."""
    stamp = stamp_of(entry["path"], now_ns)
    if stamp is not None and stamp == entry.get("stamp"):
        return entry.get("sha"), None, stamp
    found = read_entry(entry, project)
    return _sha(found), found, stamp


def read_file(path: str, scope: Scope) -> tuple[str, bytes] | Refused:
    """``(sha256 hex of the first HASH_CAP bytes, those bytes up to FILE_CAP + 1)`` of
    ``path`` read through the one door (:func:`supervisor.state._intake.read`: links
    followed only within ``scope``, never into ``/proc``, ``/sys``, ``/dev``, never a FIFO or
    device), or the door's :class:`~supervisor.state._intake.Refused` (``kind`` ``missing``
    when it is gone)."""
    from .._hashing import sha256

    got = read(path, scope, cap=HASH_CAP, whole=False)
    if isinstance(got, Refused):
        return got
    return sha256(got.data).hexdigest(), got.data[: FILE_CAP + 1]


def read_entry(entry: dict[str, Any], project: Scope) -> tuple[str, bytes] | Refused:
    """What the session was given of baseline ``entry``'s file, read as :func:`read_file`
    reads it (in :func:`scope_for`): the file, or for a rules file (``"rule": true``: a
    ``.claude/rules`` or ``.cursor/rules`` file, delivered without its frontmatter, as
    ``stages/instructions/rules.py`` supplies it and the harnesses load it) its body alone,
    hashed alone: a rule's refresh carries the body, and an edit of its frontmatter alone
    refreshes nothing. A rules file over :data:`FILE_CAP` keeps the whole file's hash."""
    found = read_file(entry["path"], scope_for(entry, project))
    if isinstance(found, Refused) or entry.get("rule") is not True or len(found[1]) > FILE_CAP:
        return found
    from .._hashing import sha256
    from ._rules import split_frontmatter

    body = split_frontmatter(found[1].decode("utf-8", "surrogateescape"))[1]
    data = body.encode("utf-8", "surrogateescape")
    return sha256(data).hexdigest(), data


def _sha(found: tuple[str, bytes] | Refused) -> str | None:
    return None if isinstance(found, Refused) else found[0]


def _folder(state_dir: StrPath) -> Any:
    from ..state._statedir import open_subpath

    folder = open_subpath(state_dir, (REFRESH_DIR,), create=True)
    if folder is None:  # not with create=True; for the types
        raise StateError(f"{os.path.join(state_dir, REFRESH_DIR)} cannot be created")
    return folder


def _checker(key: bytes | None) -> Any:
    """The shape check of a baseline read back: ours only when it carries our signature
    (:func:`supervisor.state._signing.genuine`; a planted one listing ``~/.ssh/id_rsa`` would
    otherwise be injected as "changed"), then its fields; a failure sets the file aside."""
    from ..state._signing import genuine

    def check(value: Any) -> dict[str, Any]:
        if not genuine(value, key):
            raise ValueError("not signed by this user's key")
        return _check_baseline(value)

    return check


def _check_baseline(value: Any) -> dict[str, Any]:
    if not (isinstance(value, dict) and isinstance(value.get("files"), list)):
        raise ValueError("not a baseline")
    for entry in value["files"]:
        if not (isinstance(entry, dict) and isinstance(entry.get("path"), str)
                and isinstance(entry.get("shown"), str)
                and (entry.get("sha") is None or isinstance(entry.get("sha"), str))
                and (entry.get("text") is None or isinstance(entry.get("text"), str))
                and isinstance(entry.get("user", False), bool)
                and isinstance(entry.get("rule", False), bool)
                and (entry.get("stamp") is None or isinstance(entry.get("stamp"), list))):
            raise ValueError("not a baseline entry")
    return value


def record_baseline(state_dir: StrPath, session_id: str, harness: str,
                    files: Iterable[tuple[str, str, str] | tuple[str, str, str, bool]
                                    | tuple[str, str, str, bool, bool]],
                    project_dir: StrPath) -> int:
    """Record what session ``session_id`` has now: ``files`` are ``(absolute path, shown
    name, how[, user[, rule]])`` with ``how`` ``"digest"`` (injected) or ``"harness"`` (loaded
    by the harness itself), ``user`` True for a file allowed outside the project (a home file
    the harness documents, one the config names or allows; :func:`scope_for`) and ``rule``
    True for a rules file, given without its frontmatter (:func:`read_entry`). Each file is read
    through the one door with that scope (``project_dir``'s otherwise), so one refused now has
    no hash and is refused the same way later. Replaces the session's baseline, prunes
    baselines older than :data:`KEEP_DAYS` and refreshes the fast path's watch list. Returns
    the number of files recorded.

    Raises:
        StateError: the state dir cannot be used.
    """
    if not session_id:
        return 0
    from ..state._signing import seal, user_key

    try:
        key = user_key(create=True)
    except OSError:
        key = None
    if key is None:
        return 0  # no home, no key: a baseline nobody could trust is not written (no refresh)
    project = project_scope(project_dir)
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    text_left = TEXT_BUDGET
    for path, shown, how, *rest in files:
        if path in seen or len(entries) >= MAX_FILES:
            continue
        seen.add(path)
        entry: dict[str, Any] = {"path": path, "shown": shown, "how": how,
                                 "user": bool(rest and rest[0])}
        if len(rest) > 1 and rest[1]:
            entry["rule"] = True
        stamp = stamp_of(path, time.time_ns())  # before the read: a write after it is seen
        found = read_entry(entry, project)
        text = None
        if not isinstance(found, Refused) and len(found[1]) <= min(FILE_CAP, text_left):
            text = found[1].decode("utf-8", "replace")
            text_left -= len(found[1])
        entries.append({**entry, "sha": _sha(found), "text": text, "stamp": stamp})
    doc = seal({"harness": harness, "written": time.time(), "files": entries}, key)
    with _folder(state_dir) as folder, folder.flock(".flock", timeout=5.0):
        folder.write_json(f"{session_key(session_id)}.json", doc)
        _prune(folder)
        _restamp(state_dir, folder, project, key, force=True)
    return len(entries)


def _prune(folder: Any) -> None:
    cutoff = time.time() - KEEP_DAYS * 86400
    for name in folder.names("*.json"):
        st = folder.lstat(name)
        if st is not None and st.st_mtime < cutoff:
            folder.remove(name)


def _restamp(state_dir: StrPath, folder: Any, project: Scope, key: bytes | None, *,
             force: bool) -> None:
    """Re-write the fast path's watch list with every baseline's files (with ``force``, even
    when it looks current: a new baseline may add files). The stamp and the files' ctimes are
    taken BEFORE the baselines are compared with the files, so an edit made while this runs is
    either seen as stale or changes a ctime after the recorded one. A file that some baseline
    (any session's, the caller's own included) holds a stale hash of gets no ctime record, so
    the fast path runs Python for it until that session took its change: one session starting
    or refreshing never hides a change from another."""
    from ._fastpath import ctimes_of, fastpath_dir, set_watch, snapshot, watch_complete

    docs = [folder.read_json(name, cap=BASELINE_CAP, check=_checker(key))
            for name in folder.names("*.json")]
    paths: dict[str, None] = {}
    for doc in docs:
        for entry in (doc or {}).get("files", ()):
            paths[entry["path"]] = None
    stamp_ns = snapshot()
    ctimes = ctimes_of(paths)
    current: dict[str, str | None] = {}
    stale: set[str] = set()
    now_ns = time.time_ns()
    for doc in docs:
        for entry in (doc or {}).get("files", ()):
            path = entry["path"]
            if path in stale:
                continue
            stamp = stamp_of(path, now_ns)
            if stamp is not None and stamp == entry.get("stamp"):
                continue  # unchanged since this baseline hashed it: not stale, not read
            if path not in current:
                current[path] = _sha(read_entry(entry, project))
            if current[path] != entry.get("sha"):
                stale.add(path)
    for path in stale:
        ctimes.pop(path, None)
    if not force and not stale and watch_complete(state_dir):  # re-stamp only when a watched
        # file is newer than the list (else no write); a list with a file unrecorded (written
        # while a baseline was stale, or before the records existed) would make every prompt
        # run Python: re-written now
        try:
            listed = os.lstat(os.path.join(fastpath_dir(state_dir), "watch")).st_mtime
        except OSError:
            listed = 0.0
        newest = 0.0
        for path in paths:
            try:
                st = os.stat(path)  # ctime too: the fast path sees edits that keep an old mtime
                newest = max(newest, st.st_mtime, st.st_ctime)
            except OSError:
                newest = float("inf")  # a watched file is gone: recorded absent anew
        if newest <= listed <= time.time():  # (a list stamped in the future: the clock
            return  # was set back since; its recorded ctimes no longer match: written anew)
    try:
        set_watch(state_dir, [pure_path(p) for p in paths if os.path.isabs(p) and "\n" not in p],
                  stamp_ns=stamp_ns, ctimes={pure_path(p): c for p, c in ctimes.items()})
    except (OSError, ValueError):
        pass  # no watch list: the fast path runs Python whenever refresh baselines exist


def _note(entry: dict[str, Any], new: bytes) -> str:
    """``(+3 -1 lines, first change at line 12)`` when the old text is known, else ``""``."""
    old = entry.get("text")
    if old is None:
        return ""
    import difflib

    a = old.splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    added = removed = 0
    first = None
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        first = j1 + 1 if first is None else first
        added += j2 - j1
        removed += i2 - i1
    if first is None:
        return " (whitespace or encoding only)"
    return f" (+{added} -{removed} lines, first change at line {first})"


def take_changed(state_dir: StrPath, session_id: str, project_dir: StrPath,
                 delivery: Delivery | None = None) -> str:
    """The refresh text for session ``session_id`` of project ``project_dir``: each file of
    its baseline whose content changed since, once, whole (or a line saying it is too big,
    gone, or now refused by the one door: a file turned into a link out of the project or
    into ``/proc``); ``""`` when nothing changed or there is no baseline. The baseline moves
    to what was delivered: with an open ``delivery``, only once it settles delivered; without
    one, at once.

    Raises:
        StateError: the state dir cannot be used.
    """
    if not session_id:
        return ""
    from ..state._statedir import StateDir

    existing = StateDir.open_existing(state_dir)
    if existing is None:
        return ""
    existing.close()
    from ..state._signing import seal, user_key

    key = user_key(create=False)
    if key is None:
        return ""  # no key: no baseline is ours (none was written without one)
    name = f"{session_key(session_id)}.json"
    blocks: list[str] = []
    project = project_scope(project_dir)
    with _folder(state_dir) as folder:
        with folder.flock(".flock", timeout=5.0) as held:
            if not held:
                return ""  # another hook of this session is delivering right now
            doc = folder.read_json(name, cap=BASELINE_CAP, check=_checker(key))
            if doc is None:
                return ""
            from ..state._delivery import in_flight, in_flight_holds

            # path: (sha, text, stamp) of what is being delivered
            moves: dict[str, tuple[str | None, str | None, list[object] | None]] = {}
            now_ns = time.time_ns()
            settled = False  # a stamp newly recorded for a file read unchanged
            for entry in doc["files"]:
                sha, found, stamp = judged(entry, project, now_ns)
                if found is None:
                    continue  # its stamp says unchanged: not read
                if sha == entry.get("sha"):
                    if stamp is not None and stamp != entry.get("stamp"):
                        entry["stamp"], settled = stamp, True
                    continue
                mark = entry.get("in_flight")
                if isinstance(mark, dict) and mark.get("sha") == sha and in_flight_holds(mark):
                    continue  # a parallel hook of this session is delivering this version
                blocks.append(_block(entry, found, str(doc.get("harness") or "")))
                moves[entry["path"]] = (sha, found[1].decode("utf-8", "replace")
                                        if not isinstance(found, Refused)
                                        and len(found[1]) <= FILE_CAP else None, stamp)
                if delivery is None:
                    entry["sha"], entry["text"], entry["stamp"] = moves[entry["path"]]
                else:  # the baseline (its stamp too) moves only once the refresh was
                    entry["in_flight"] = {**in_flight(), "sha": sha}  # delivered (issue 11)
            if settled and not blocks:  # nothing to deliver: the settled stamps, now
                folder.write_json(name, seal(doc, key))
            if blocks:
                doc["written"] = time.time()
                folder.write_json(name, seal(doc, key))
                if delivery is not None:
                    delivery.reserve(lambda: _settle_baseline(state_dir, name, moves, True),
                                     lambda: _settle_baseline(state_dir, name, moves, False))
        _restamp(state_dir, folder, project, key, force=False)
    return "\n".join(blocks)


def reread_by_harness(state_dir: StrPath, session_id: str, project_dir: StrPath) -> int:
    """A harness process that resumed session ``session_id`` read its own instruction files
    anew (Claude ``--resume``, Codex ``exec resume``): the baseline's entries the harness
    loads itself (``how`` ``harness``) move to the files as they are now, so the next prompt
    hook does not inject what the harness already holds. Entries the digest gave stay (the
    transcript holds their old text). Returns the number of entries moved; 0 without a
    baseline (or no per-user key to trust one with). Files are read through the one door in
    ``project_dir``'s scope, as :func:`take_changed` reads them. Never raises: a state dir
    that cannot be used moves nothing."""
    if not session_id:
        return 0
    from ..state._signing import seal, user_key

    key = user_key(create=False)
    if key is None:
        return 0
    project = project_scope(project_dir)
    from ..state._statedir import StateDir

    name = f"{session_key(session_id)}.json"
    moved = 0
    try:
        existing = StateDir.open_existing(state_dir)
        if existing is None:
            return 0
        existing.close()
        with _folder(state_dir) as folder:
            with folder.flock(".flock", timeout=5.0) as held:
                if not held:
                    return 0
                doc = folder.read_json(name, cap=BASELINE_CAP, check=_checker(key))
                if doc is None:
                    return 0
                now_ns = time.time_ns()
                for entry in doc["files"]:
                    if entry.get("how") != "harness":
                        continue
                    sha, found, stamp = judged(entry, project, now_ns)
                    if found is None or sha == entry.get("sha"):
                        continue
                    entry["sha"], entry["stamp"] = sha, stamp
                    entry["text"] = (found[1].decode("utf-8", "replace")
                                     if not isinstance(found, Refused) and len(found[1]) <= FILE_CAP
                                     else None)
                    moved += 1
                if moved:
                    doc["written"] = time.time()
                    folder.write_json(name, seal(doc, key))
            _restamp(state_dir, folder, project, key, force=True)
    except (StateError, OSError):
        return 0
    return moved


def _settle_baseline(state_dir: StrPath, name: str,
                     moves: dict[str, tuple[str | None, str | None, list[object] | None]],
                     delivered: bool) -> None:
    """After the envelope carrying a refresh went out (``delivered``) or failed: each entry
    of baseline ``name`` in ``moves`` (``{path: (sha, text, stamp)}``) that still carries this
    process's in-flight mark loses the mark and, when delivered, moves to what was
    delivered. A baseline replaced since (a new start) has no such mark and is left alone.

    Raises:
        OSError: the state dir cannot be used or the baseline stayed locked.
    """
    from ..state._signing import seal, user_key

    key = user_key(create=False)
    if key is None:
        return
    try:
        with _folder(state_dir) as folder, folder.flock(".flock", timeout=5.0) as held:
            if not held:
                raise OSError(f"refresh baseline {name} stayed locked")
            doc = folder.read_json(name, cap=BASELINE_CAP, check=_checker(key))
            if doc is None:
                return
            changed = False
            for entry in doc["files"]:
                mark = entry.get("in_flight")
                if entry["path"] not in moves or not isinstance(mark, dict) \
                        or mark.get("pid") != os.getpid():
                    continue
                del entry["in_flight"]
                if delivered:
                    entry["sha"], entry["text"], entry["stamp"] = moves[entry["path"]]
                changed = True
            if changed:
                doc["written"] = time.time()
                folder.write_json(name, seal(doc, key))
    except StateError as err:
        raise OSError(str(err)) from err


def _block(entry: dict[str, Any], found: tuple[str, bytes] | Refused, harness: str) -> str:
    from .._harnesses import label
    from .._sanitize import one_line, removed_note
    from ..state._intake import decode

    shown = one_line(str(entry["shown"]))  # a path in the tree is untrusted text (ESC, LF)
    had = (f"{label(harness, 'the harness')} loaded at start"
           if entry.get("how") == "harness" else "the session-start digest gave you")
    if isinstance(found, Refused) and found.kind in ("missing", "unreadable"):
        return (f"INSTRUCTIONS CHANGED: {shown} (which {had}) was deleted or became unreadable "
                "during this session; stop following its old version.\n")
    if isinstance(found, Refused):
        return (f"INSTRUCTIONS CHANGED: {shown} (which {had}) changed during this session and "
                f"is no longer given to you ({found.reason}); stop following its old version.\n")
    if len(found[1]) > FILE_CAP:
        return (f"INSTRUCTIONS CHANGED: {shown} (which {had}) was edited during this session; it is "
                f"over the {FILE_CAP // 1024} KiB a refresh carries, so read it again directly "
                "before going on.\n")
    got = decode(found[1])
    if isinstance(got, Refused):  # binary now
        return (f"INSTRUCTIONS CHANGED: {shown} (which {had}) changed during this session and "
                f"is no longer given to you ({got.reason}); stop following its old version.\n")
    text, _lossy, hidden = got  # untrusted text, cleaned (issue 11)
    note = f"{removed_note(hidden, str(shown))}\n" if hidden else ""
    return (f"INSTRUCTIONS CHANGED: {shown} (which {had}) was edited during this session"
            f"{_note(entry, found[1])}; its current version follows and replaces the one you "
            f"had.\n### {shown} (current version)\n{note}{text}"
            f"{'' if text.endswith(chr(10)) else chr(10)}")
