"""Delivery is recorded only after delivery: write an envelope whole, then commit what it proves.

Records that say "the model received this": the completion record (``complete.json``) with
the session's start ledger and the start record of :mod:`supervisor.session._starts`, the memory
stage's handoff count, a deferred result's claim (``delivered-…``), the nested-instructions
ledger, the refresh baseline. Each used to be written while the digest ran, so a hook whose stdout failed (``>/dev/full``, ``EPIPE``, a
non-blocking pipe that took 4,096 bytes of 6,000, a kill) recorded a delivery nobody got
(issue 11, items 5 and 6). The rule now is two-phase:

1. While the digest runs, a record that means "delivered" is only *reserved*: it goes into a
   :class:`Delivery` (a commit and a rollback per record) instead of being written.
2. :func:`write_whole` writes the envelope to stdout whole (looping on partial writes and
   ``EAGAIN``, within a deadline).
3. :meth:`Delivery.settle` commits every reservation when the write succeeded, else rolls
   each back, leaving the state as it was; the caller says so on stderr.

Stage programs are separate processes: they stage their record writes as files under
``<state>/staged/<id>/`` (:func:`staged_write`, ``SUPERVISE_DELIVERY_ID`` in their
environment) and :meth:`Delivery.settle` moves them into place or drops them. The delivery is
passed to each writer (``SessionContext.delivery``, or an argument), never found in the
process: a writer given none (a stage run by hand, a preview, a test) writes straight to its
target, whatever delivery someone else has open.

Stdlib only and cheap to import: on the hook's hot path and imported by stage programs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from typing import final

    from ._statedir import StateDir
else:
    def final(cls: type) -> type:  # typing.final marks nothing at run time either
        return cls

DELIVERY_VAR = "SUPERVISE_DELIVERY_ID"
"""Environment variable naming the open delivery a stage stages its record writes for."""

STAGED_DIR = "staged"
"""Folder of the state dir holding stage writes that wait for their delivery to be settled."""

WRITE_DEADLINE = 10.0
"""Seconds :func:`write_whole` waits in total for a slow reader. Inside every registration's
timeout: the session-start hook has ``TIMEOUT_MARGIN`` (60 s) past the digest budget, the
per-prompt and post-tool hooks 30 s (``PROMPT_TIMEOUT``)."""

STALE_STAGED = 3600.0
"""Seconds after which a staged folder left by a killed hook is removed, never committed."""

_SEP = "%2F"


class WriteFailed(Exception):
    """The envelope could not be written whole; ``str()`` says why, in one line."""


_closed_at_start: set[int] = set()


def mark_closed_at_start(fd: int) -> None:
    """Record that ``fd`` was closed when the process started (``supervise hook ... >&-``);
    it now points at ``/dev/null`` (so no file we open takes its number), and
    :func:`write_whole` to it fails: a write nobody can read is no delivery."""
    _closed_at_start.add(fd)


def write_whole(fd: int, data: bytes, deadline: float = WRITE_DEADLINE) -> None:
    """Write all of ``data`` to ``fd``, then flush it (``fsync`` is not needed for a pipe).

    Loops on partial writes, ``EINTR`` and ``EAGAIN`` (a non-blocking pipe whose reader is slow:
    a 4 KiB pipe takes 4,096 bytes of a 6 KB envelope, then refuses), waiting with
    ``select`` for room until ``deadline`` seconds have passed. The descriptor's blocking mode
    is not changed.

    Raises:
        WriteFailed: ``fd`` was closed when the process started (:func:`mark_closed_at_start`),
            the reader left (``EPIPE``), the device is full (``ENOSPC``, e.g.
            ``/dev/full``), the descriptor is unusable, or the deadline passed; the message
            names the error and how many bytes of how many went out.
    """
    import select

    if fd in _closed_at_start:
        raise WriteFailed(f"fd {fd} (stdout) was closed when supervise started; 0 of "
                          f"{len(data)} bytes went out")
    view = memoryview(data)
    end = time.monotonic() + deadline
    sent = 0
    while sent < len(data):
        try:
            sent += os.write(fd, view[sent:])
            continue
        except InterruptedError:
            continue
        except BlockingIOError:
            pass
        except OSError as err:
            from .._errors import describe_os_error

            raise WriteFailed(f"{describe_os_error(err)} after {sent} of {len(data)} bytes") from err
        left = end - time.monotonic()
        if left <= 0:
            raise WriteFailed(f"the reader took only {sent} of {len(data)} bytes in "
                              f"{deadline:g}s")
        try:
            select.select([], [fd], [], left)
        except InterruptedError:
            continue
        except (OSError, ValueError) as err:
            raise WriteFailed(f"cannot wait for the reader ({err}) after {sent} of "
                              f"{len(data)} bytes") from err


@final
class Delivery:
    """Reservations that commit only once their envelope was delivered.

    Attributes:
        ident: a fresh random id; stages see it as ``SUPERVISE_DELIVERY_ID``.
        state_dir: the state dir holding ``staged/<ident>/``; None until known (a bridge
            learns it when it resolves the project; the session protocol sets it).
    """

    def __init__(self, state_dir: StrPath | None) -> None:
        self.ident = os.urandom(16).hex()
        self.state_dir = state_dir
        self._actions: list[tuple[Callable[[], None], Callable[[], None]]] = []
        self.settled = False

    def reserve(self, commit: Callable[[], None], rollback: Callable[[], None]) -> None:
        """Hold ``commit`` until :meth:`settle`; ``rollback`` runs instead when delivery failed.
        Reservations settle in the order they were made (the completion record before the
        start record that fingerprints it). An exception of either is reported by
        :meth:`settle`, never raised."""
        self._actions.append((commit, rollback))

    @property
    def reserved(self) -> int:
        """Reservations waiting for :meth:`settle` (records of this process, not stages')."""
        return len(self._actions)

    def env(self) -> dict[str, str]:
        """The stage environment entry naming this delivery."""
        return {DELIVERY_VAR: self.ident}

    def settle(self, delivered: bool) -> list[str]:
        """Commit every reservation (``delivered``) or roll each back; idempotent.

        Returns:
            one line per record that could not be committed (for stderr); empty when all went.
        """
        if self.settled:
            return []
        self.settled = True
        problems: list[str] = []
        for commit, rollback in self._actions:
            try:
                (commit if delivered else rollback)()
            except Exception as err:  # noqa: BLE001 - a finally path: report, never raise
                problems.append(str(err) or type(err).__name__)
        self._actions.clear()
        if self.state_dir is not None:
            problems += _settle_staged(self.state_dir, self.ident, delivered)
        return problems


IN_FLIGHT_STALE = 60.0
"""Seconds after which an in-flight mark (:func:`in_flight`) no longer holds, whatever its
pid: past every per-event hook's registered timeout (30 s) plus :data:`WRITE_DEADLINE`, so
the harness has killed its hook by then."""


def in_flight() -> dict[str, float]:
    """A mark meaning "this process is delivering it now": ``{"pid": os.getpid(), "at":
    time.time()}`` (JSON-ready). A ledger writes it, under its lock, beside a record it
    only *reserves* (its commit waits for the envelope, :meth:`Delivery.reserve`), so a
    concurrent hook of the same session that takes the lock in between skips the record
    instead of delivering it a second time (Claude fires ``PostToolUse`` for parallel
    ``Read`` tools at once; issue 22 item 6). The commit or the rollback removes it."""
    return {"pid": os.getpid(), "at": time.time()}


def in_flight_holds(mark: object, now: float | None = None) -> bool:
    """Whether ``mark`` (read back from a ledger) still stands for a delivery under way: a
    mapping with an integer ``pid`` and a number ``at``, younger than
    :data:`IN_FLIGHT_STALE` seconds (and not in the future by more than that), whose process
    is alive (``os.kill(pid, 0)``; a dead holder's mark is void, so a hook killed between
    reserve and settle loses nothing: the next hook delivers). Anything else is False."""
    if not isinstance(mark, dict):
        return False
    pid, at = mark.get("pid"), mark.get("at")
    if type(pid) is not int or pid <= 0 or not isinstance(at, (int, float)) \
            or isinstance(at, bool):
        return False
    age = (time.time() if now is None else now) - at
    if not -IN_FLIGHT_STALE < age < IN_FLIGHT_STALE:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


@contextmanager
def open_delivery(state_dir: StrPath | None) -> Iterator[Delivery]:
    """Open a :class:`Delivery` for the ``with`` body; anything not settled inside it (an
    exception, a cancellation) is rolled back on the way out. The caller passes it to every
    writer that must wait for it (:attr:`supervisor.config._context.SessionContext.delivery`,
    or an argument): there is no "current delivery" of the process."""
    delivery = Delivery(state_dir)
    try:
        yield delivery
    finally:
        delivery.settle(False)


def staged_write(state_dir: StrPath, rel: str, data: bytes,
                 env: Mapping[str, str] | None = None) -> bool:
    """Write ``data`` as state file ``rel`` (``"memory/handoff.delivered"``) so that it only
    counts once the digest was delivered: into ``<state>/staged/<id>/<rel, '/' as %2F>``
    while a delivery is open (``SUPERVISE_DELIVERY_ID`` in ``env``, default ``os.environ``),
    through the state door (:mod:`supervisor.state._statedir`: no link followed). :meth:`Delivery.settle`
    moves it into place or drops it.

    Returns:
        True when staged; False when no delivery is open (the caller writes ``rel`` itself).

    Raises:
        StateError: the staged folder cannot be used (reported as for the record itself).
    """
    env = os.environ if env is None else env
    ident = env.get(DELIVERY_VAR, "")
    parts = rel.split("/")
    if not ident or not ident.isalnum() or any(p in ("", ".", "..") for p in parts):
        return False
    from ._statedir import open_subpath

    own = env.get("SUPERVISE_STATE_DIR", "")
    if own and os.path.realpath(own) != os.path.realpath(state_dir):
        # Another state dir (a memory store shared by the worktrees of one repository keeps
        # its records with the main checkout's): the digest's own staged folder names it,
        # so settling the delivery settles that folder too (:func:`_settle_staged`).
        mine = open_subpath(own, (STAGED_DIR, ident), create=True)
        assert mine is not None
        with mine:
            known = (mine.read(ALSO, 64 * 1024) or b"").decode("utf-8", "replace").splitlines()
            target = os.path.abspath(state_dir)
            if target not in known:
                mine.write(ALSO, "".join(f"{line}\n" for line in (*known, target)).encode())
    folder = open_subpath(state_dir, (STAGED_DIR, ident), create=True)
    assert folder is not None
    with folder:
        folder.write(_SEP.join(parts), data)
    return True


ALSO = "@also"
"""Entry of a staged folder naming, one per line, other state dirs whose ``staged/<id>/``
folder belongs to the same delivery (settled with it, never committed as a record)."""


def _settle_staged(state_dir: StrPath, ident: str, delivered: bool, *,
                   follow: bool = True) -> list[str]:
    """Move ``staged/<ident>/*`` into place (``delivered``) or drop them; remove folders of
    killed hooks older than :data:`STALE_STAGED`; then the same in each state dir the folder
    names (:data:`ALSO`, ``follow``: one hop). Never raises."""
    from .._errors import StateError
    from ._statedir import open_subpath

    if not os.path.lexists(os.path.join(state_dir, STAGED_DIR)):
        return []  # the common case: no stage staged anything; nothing is opened
    problems: list[str] = []
    try:
        root = open_subpath(state_dir, (STAGED_DIR,))
    except StateError:
        return []
    if root is None:
        return []
    also: list[str] = []
    with root:
        for name in root.names():
            info = root.lstat(name)
            if name != ident:
                if info is not None and time.time() - info.st_mtime > STALE_STAGED:
                    _remove(os.path.join(root.path, name))
                continue
            also += _also(root, name) if follow else []
            if delivered:
                problems += _commit_folder(state_dir, root, name)
            _remove(os.path.join(root.path, name))
    for other in also:  # only a folder this delivery staged into (its random id) is touched
        if os.path.isabs(other) and os.path.realpath(other) != os.path.realpath(state_dir):
            problems += _settle_staged(other, ident, delivered, follow=False)
    return problems


def _also(root: StateDir, name: str) -> list[str]:
    """The other state dirs staged folder ``name`` names (:data:`ALSO`); never raises."""
    from .._errors import StateError

    try:
        folder = root.sub(name)
        if folder is None:
            return []
        with folder:
            data = folder.read(ALSO, 64 * 1024) or b""
    except StateError:
        return []
    return [line for line in data.decode("utf-8", "replace").splitlines() if line]


def _commit_folder(state_dir: StrPath, root: StateDir, name: str) -> list[str]:
    from .._errors import StateError
    from ._statedir import open_subpath

    problems: list[str] = []
    try:
        folder = root.sub(name)
    except StateError as err:
        return [str(err)]
    if folder is None:
        return []
    with folder:
        for entry in folder.names():
            parts = entry.split(_SEP)
            if "" in parts or "." in parts or ".." in parts or parts[0] in (STAGED_DIR, ALSO):
                continue
            try:
                target = open_subpath(state_dir, tuple(parts[:-1]), create=True)
                if target is None:
                    continue
                with target:
                    folder.rename(entry, parts[-1], into=target)
            except StateError as err:
                problems.append(f"cannot commit {'/'.join(parts)}: {err}")
    return problems


def _remove(folder: StrPath) -> None:
    """Remove a staged folder (a link in its place is unlinked, never followed)."""
    if os.path.islink(folder) or not os.path.isdir(folder):
        try:
            os.unlink(folder)
        except OSError:
            pass
        return
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
