"""Deferred stages: detached runners under their own deadline, results delivered exactly once.

A deferred stage (``deferred = true``; network checks and other slow work) never holds up the
digest. The digest spawns ``python -m supervisor.engine._deferred_runner`` in its own session with all stdio
on ``/dev/null`` (an inherited stdout would make the harness's capture wait for it: brief,
supervisor.md §2(d)), and never waits. The runner is its own child
subreaper, applies the same kill rules under its own deadline and writes its result
atomically to ``<state>/deferred/<stage>/result-<run id>.json``.

Delivery is exactly once: whoever renames a result file to ``delivered-…`` (an atomic
``rename``) delivers it: the digest that launched it when it is already done, else the next
prompt hook (:func:`take_undelivered`) or the next digest.

Its output is seen once per session too: a digest whose own run is still in progress shows
the newest undelivered result of an earlier run (say a process of the session that ended
before that result came: OpenCode ``run -c`` runs a full start again); it records that it
showed it (``shown-<its run>.json``: the session and the fingerprint of status and output,
signed). When its own run's result then reaches the same session's prompt hook with the same
status and output, the hook says so in one line instead of repeating the output
(:func:`take_undelivered`); a different result, or another session, gets it whole.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Iterator, Sequence

from .. import _jsontext
from .._record import asdict, record, replace
from ..state._delivery import DELIVERY_VAR
from .._errors import StateError
from .._sanitize import clean, removed_note
from ._reaper import RUN_VAR
from ..state._statedir import RECORD_CAP, RESULT_OVERHEAD, StateDir, notice

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from typing import Any
    from ..config._context import SessionContext
    from ..config._plan import DigestPlan, StagePlan
    from ..state._delivery import Delivery as OpenDelivery  # not this module's Delivery

DEFAULT_DEADLINE = 120.0
"""Seconds a deferred stage may run when it sets no ``timeout``."""
DEFERRED_DIR = "deferred"

_spawned: set[int] = set()

NO_KEY = ("no home directory (HOME unset, empty or relative, no XDG_STATE_HOME) to keep the "
          "deferred-result key in; set HOME to run deferred stages")
"""The one-line reason a deferred stage is not launched when there is no per-user key
(:func:`supervisor.state._signing.key_path` None)."""


def result_key(*, create: bool) -> bytes | None:
    """The per-user key every deferred result is signed with
    (:func:`supervisor.state._signing.user_key`): outside every project tree, so a result
    planted in a cloned repository cannot carry a valid signature.

    Raises:
        OSError: ``create`` and the key cannot be made (no home: :data:`NO_KEY`).
    """
    from ..state._signing import user_key

    try:
        return user_key(create=create)
    except FileNotFoundError as err:
        from ..state._signing import key_path

        if key_path() is None:
            raise OSError(NO_KEY) from err
        raise


def _signature(data: dict[str, Any], key: bytes) -> str:
    """Keyed BLAKE2b (32 bytes, hex) of the record without its ``sig`` field
    (:func:`supervisor.state._signing.signature`)."""
    from ..state._signing import signature

    return signature(data, key)


def _genuine(data: dict[str, Any], stage: str, run: str, key: bytes | None) -> bool:
    """True when result ``data`` in stage ``stage``'s folder, file ``result-<run>``, was written
    by our runner: its name and run id match the folder and file, and its ``sig`` is the
    keyed hash under this user's :func:`result_key`."""
    from .._hashing import compare_digest

    sig = data.get("sig")
    return (key is not None and isinstance(sig, str) and data.get("name") == stage
            and f"{data.get('run_id')}.json" == run
            and compare_digest(sig, _signature(data, key)))


def _refuse(directory: StateDir, stage: str, name: str, why: str) -> None:
    """Set result ``name`` aside as ``refused-…`` (never delivered) and name it once."""
    run = name[len("result-"):]
    try:
        directory.rename(name, f"refused-{run}")
    except StateError:
        pass
    notice(f"[supervise] refused deferred result {DEFERRED_DIR}/{stage}/{name}: {why}; set "
           f"aside as refused-{run}, NOT delivered (a deferred result is delivered only when "
           "this machine's runner wrote it for a stage the config marks deferred)")


def stage_dir(state_dir: StrPath, name: str) -> str:
    """Where stage ``name``'s deferred records live (for messages; access goes through
    :func:`open_stage_dir`)."""
    return os.path.join(state_dir, DEFERRED_DIR, name)


def open_stage_dir(state_dir: StrPath, name: str, *, create: bool = False) -> StateDir | None:
    """Stage ``name``'s deferred folder through the state door (no link followed), or None
    when it does not exist and ``create`` is False.

    Raises:
        StateError: the state dir or a folder on the way is unusable (a symlinked state dir).
    """
    from ..state._statedir import open_subpath

    return open_subpath(state_dir, (DEFERRED_DIR, name), create=create)


def result_cap(max_output: int | None) -> int:
    """Bytes a result file of a stage with output cap ``max_output`` may have: twice the cap
    (JSON escaping) plus :data:`~supervisor.state._statedir.RESULT_OVERHEAD`; with no cap (a
    stage the current configuration does not name) the config's default
    :data:`~supervisor.config._plan.DEFAULT_MAX_OUTPUT`. The runner trims the output so its file
    fits; a bigger file was not written by us and is corrupt."""
    from ..config._plan import DEFAULT_MAX_OUTPUT

    return 2 * (max_output or DEFAULT_MAX_OUTPUT) + RESULT_OVERHEAD


def _encode_result(data: dict[str, Any], cap: int, key: bytes | None = None) -> bytes:
    """``data`` as JSON within ``cap`` bytes: the output is cut (and says so) when needed.
    With ``key`` the record carries ``sig``, its keyed hash (:func:`_signature`)."""
    def encode(record: dict[str, Any]) -> bytes:
        if key is not None:
            record = {**record, "sig": _signature(record, key)}
        return _jsontext.dumps(record, ensure_ascii=False).encode("utf-8", "replace")

    raw = encode(data)
    output = str(data.get("output", ""))
    while len(raw) > cap and output:
        output = output[: len(output) // 2]
        data = {**data, "output": output + "\n[supervise] OUTPUT CUT: the result was too large "
                "to store whole\n"}
        raw = encode(data)
    return raw


def _records(directory: StateDir, pattern: str) -> list[str]:
    try:
        return directory.names(pattern)
    except StateError:
        return []


def _read(directory: StateDir, name: str, cap: int = RECORD_CAP) -> dict[str, Any] | None:
    """A JSON object record, or None when absent, unreadable or corrupt (set aside)."""
    def must_be_object(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValueError("expected an object")
        return value

    try:
        data: dict[str, Any] | None = directory.read_json(name, cap, must_be_object)
    except StateError as err:
        notice(f"[supervise] {err}")
        return None
    return data


def _runner_alive(record: dict[str, Any] | None) -> bool:
    if not record:
        return False
    import psutil

    try:
        proc = psutil.Process(int(record["pid"]))
        return bool(abs(proc.create_time() - float(record["create_time"])) < 0.05
                    and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.Error, KeyError, TypeError, ValueError, OverflowError):
        return False


@record
class Launch:
    """What the digest knows about one deferred stage after launching it."""

    name: str
    title: str
    run_id: str | None
    started: float
    deadline: float
    error: str | None = None
    lost: tuple[str, ...] = ()
    """Earlier runs of this stage that ended without a result, one text each."""


def launch_all(specs: Sequence[StagePlan], context: SessionContext, config: DigestPlan,
               run: Any = None) -> list[Launch]:
    """Start a detached runner for each deferred stage unless one is still running.

    Never raises: a stage that cannot be launched (unwritable state dir, missing program)
    comes back with ``error`` set, and the digest says so.
    """
    from ._launch import stage_argv, stage_env

    launches = []
    for spec in specs:
        deadline = spec.timeout or DEFAULT_DEADLINE
        title = spec.title or spec.name
        try:
            directory = open_stage_dir(context.state_dir, spec.name, create=True)
            assert directory is not None
        except StateError as err:
            from ..state._statedir import link_reference

            why = link_reference(context.state_dir) or str(err)
            launches.append(Launch(spec.name, title, None, time.time(), deadline, error=why))
            continue
        try:
            # Never wait here: the digest's event loop would stall past its budget. A held
            # lock means another digest is launching this stage right now.
            with directory, directory.flock(".lock", timeout=0.0) as held:
                if not held:
                    launches.append(Launch(spec.name, title, None, time.time(), deadline))
                    continue
                current = _read(directory, "running.json")
                if _runner_alive(current):
                    assert current is not None
                    launches.append(Launch(spec.name, title, str(current.get("run_id")),
                                           float(current.get("started", time.time())), deadline))
                    continue
                # Its runner is gone; its stage may not be (the runner's guardian killed
                # with it): never a second run beside a live first one.
                stopped = _stop_orphaned_run(current)
                lost = _take_lost(directory, spec.name, current, stopped)
                result_key(create=True)  # the runner signs its result with it
                run_id = f"{int(time.time() * 1000)}-{os.urandom(4).hex()}"
                token = os.urandom(16).hex()
                stage_argv(spec)  # an unknown builtin is reported here, not in the runner
                cwd_path = (os.path.join(context.project_dir, spec.cwd)  # an absolute cwd wins
                            if spec.cwd else os.fspath(context.project_dir))
                inner = replace(spec, deferred=False, timeout=None,
                                max_output=spec.max_output or config.max_output,
                                env={**spec.env, RUN_VAR: run_id})
                runner = [sys.executable, "-I", "-m", "supervisor.engine._deferred_runner",
                          "--dir", str(stage_dir(context.state_dir, spec.name)),
                          "--run-id", run_id, "--deadline", str(deadline),
                          "--grace", str(config.grace), "--cwd", str(cwd_path),
                          "--spec", _jsontext.dumps(asdict(inner))]
                devnull = os.devnull
                env = stage_env(spec, context, token, config)
                env.pop(DELIVERY_VAR, None)  # the runner outlives the digest's delivery
                pid = os.posix_spawn(runner[0], runner, env, setsid=True,
                                     file_actions=[(os.POSIX_SPAWN_OPEN, 0, devnull, os.O_RDONLY, 0),
                                                   (os.POSIX_SPAWN_OPEN, 1, devnull, os.O_WRONLY, 0),
                                                   (os.POSIX_SPAWN_OPEN, 2, devnull, os.O_WRONLY, 0),
                                                   *_close_inherited()])
                _spawned.add(pid)
                import psutil

                try:
                    created = psutil.Process(pid).create_time()
                except psutil.Error:
                    created = 0.0
                now = time.time()
                directory.write_json("running.json", {
                    "pid": pid, "create_time": created, "run_id": run_id, "started": now,
                    "deadline": deadline, "name": spec.name, "title": title}, fsync=True)
                launches.append(Launch(spec.name, title, run_id, now, deadline, lost=tuple(lost)))
        except Exception as err:  # noqa: BLE001 - reported in the digest, never fatal
            launches.append(Launch(spec.name, title, None, time.time(), deadline,
                                   error=f"{type(err).__name__}: {err}"))
    return launches


def _stop_orphaned_run(record: dict[str, Any] | None) -> int:
    """Kill every live process of the earlier run ``record`` (a ``running.json`` whose
    runner is dead): they carry its run id as :data:`~supervisor.engine._reaper.RUN_VAR`.
    Its runner's guardian kills them when the runner dies; this is the check of its own
    for when that did not happen (the guardian killed too). Returns how many it killed
    (0 without a record or a run id). Never raises."""
    run_id = str((record or {}).get("run_id") or "")
    if not run_id:
        return 0
    from ._guardian import UNKNOWN, kill_all

    return kill_all({0: (UNKNOWN, run_id, None)}, var=RUN_VAR)


def _lost_text(name: str, record: dict[str, Any], why: str) -> str:
    started = record.get("started")
    when = ""
    if isinstance(started, (int, float)) and not isinstance(started, bool):
        when = f" started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}"
    return (f"LOST: deferred stage '{name}' (run{when}) ended without a deliverable result "
            f"({why}); its result was NOT delivered. Run `supervise digest --only {name}` "
            "to see it now.")


def _take_lost(directory: StateDir, name: str, running_record: dict[str, Any] | None,
               stopped: int = 0) -> list[str]:
    """Claim and describe runs that ended without a result: a ``lost-*.json`` record the runner
    left (the result could not be written: disk full), or a ``running.json`` whose runner is
    dead and left no result (killed; ``stopped``: how many of its stage's processes were
    still running and were killed now). Exactly once (atomic rename); the caller holds the
    folder's lock and has checked that the runner in ``running_record`` is not alive."""
    texts = []
    for lost in _records(directory, "lost-*.json"):
        record = _read(directory, lost) or {}
        try:
            if not directory.rename(lost, lost + ".reported"):
                continue
            directory.remove(lost + ".reported")
        except StateError:
            continue
        texts.append(_lost_text(name, record, str(record.get("error") or "the runner failed")))
    if running_record is not None:
        run_id = str(running_record.get("run_id", ""))
        ours = [n for n in _records(directory, "*.json") if run_id and run_id in n
                and n != "running.json"]
        try:
            directory.remove("running.json")
        except StateError:
            pass
        if run_id and not ours and not texts:
            why = "its runner was killed or could not write its result"
            if stopped:
                why = (f"its runner was killed; its stage ran on without it ({stopped} "
                       "process(es)) and was stopped before this run started")
            texts.append(_lost_text(name, running_record, why))
    return texts


def lost_results(state_dir: StrPath) -> list[str]:
    """Describe (without claiming) runs that ended without a result, for ``supervise status``.
    Never raises."""
    texts = []
    for name, directory in _stage_dirs(state_dir):
        with directory:
            for lost in _records(directory, "lost-*.json"):
                record = _read(directory, lost) or {}
                texts.append(_lost_text(name, record, str(record.get("error") or "the runner failed")))
            current = _read(directory, "running.json")
            if current is not None and not _runner_alive(current):
                run_id = str(current.get("run_id", ""))
                if run_id and not [n for n in _records(directory, "*.json")
                                   if run_id in n and n != "running.json"]:
                    texts.append(_lost_text(name, current, "its runner was killed or could not "
                                            "write its result"))
    return texts


def _close_inherited() -> list[tuple[int, int]]:
    """``posix_spawn`` close actions for every inheritable descriptor above 2.

    posix_spawn, unlike subprocess, keeps every descriptor not marked close-on-exec: a
    caller's extra fd (``exec 3>&1; supervise digest | cat``) would be held by the detached
    runner for the deferred stage's whole timeout, and ``cat`` would wait for it (issue 10,
    example 6). The runner needs none of them.
    """
    actions = []
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            fd = int(name) if name.isdigit() else -1
            try:
                if fd > 2 and os.get_inheritable(fd):
                    actions.append((os.POSIX_SPAWN_CLOSE, fd))
            except OSError:
                continue  # the listing's own descriptor, already closed
        break
    return actions


def spawned_pids() -> set[int]:
    """Pids of runners this process launched (never killed by the digest's sweeps)."""
    return set(_spawned)


RESERVATION_STALE = 600.0
"""Seconds after which a reserved result is taken back even if its pid is alive (reused)."""


def _claim(directory: StateDir, name: str, cap: int, key: bytes | None = None,
           stage: str = "", delivery: OpenDelivery | None = None) -> dict[str, Any] | None:
    """Atomically claim undelivered result ``name``; None when someone else got it first
    (or it was corrupt: set aside and named).

    Two-phase (issue 11 item 5): the result is renamed to ``reserved-<pid>-<run>.json`` and,
    with a ``delivery`` passed (:class:`supervisor.state._delivery.Delivery`: the hook, the
    bridge, ``supervise digest --session-start``, an MCP answer), becomes ``delivered-…`` only once the output carrying it went out
    whole; a failed write renames it back to ``result-…`` for the next prompt or digest. A
    reservation whose process died between reserve and settle is taken back by the next reader
    (:func:`_release_orphans`).
    """
    run = name[len("result-"):]
    reserved = f"reserved-{os.getpid()}-{run}"
    data = _read(directory, name, cap)  # a planted file is set aside under its own name
    if data is None:
        return None
    if not _genuine(data, stage or os.path.basename(directory.path), run, key):
        _refuse(directory, stage or os.path.basename(directory.path), name,
                "it carries no valid signature of this machine's runner (planted or copied)")
        return None
    try:
        if not directory.rename(name, reserved):
            return None
    except StateError:
        return None
    if delivery is None:
        _settle_claim(directory, reserved, run, True)
    else:
        folder = directory.path

        def settle(delivered: bool) -> None:
            from ..state._statedir import open_subpath

            try:
                again = open_subpath(os.path.dirname(os.path.dirname(folder)),
                                     (DEFERRED_DIR, os.path.basename(folder)))
            except StateError as err:
                raise OSError(str(err)) from err
            if again is not None:
                with again:
                    _settle_claim(again, reserved, run, delivered)

        delivery.reserve(lambda: settle(True), lambda: settle(False))
    return data


def _settle_claim(directory: StateDir, reserved: str, run: str, delivered: bool) -> None:
    """``reserved-…`` becomes ``delivered-…`` (keeping only the newest), or ``result-…`` again.

    Raises:
        OSError: the rename failed (the reservation stays; the next reader takes it back).
    """
    try:
        if not delivered:
            directory.rename(reserved, f"result-{run}")
            return
        target = f"delivered-{run}"
        directory.rename(reserved, target)
    except StateError as err:
        raise OSError(str(err)) from err
    for old in _records(directory, "delivered-*.json"):  # keep only the newest delivered record
        if old != target:
            try:
                directory.remove(old)
            except StateError:
                pass


def _release_orphans(directory: StateDir) -> None:
    """Rename reservations whose process is gone (or older than :data:`RESERVATION_STALE`)
    back to ``result-…``. Never raises."""
    for name in _records(directory, "reserved-*.json"):
        pid_text, _, run = name[len("reserved-"):].partition("-")
        if not pid_text.isdigit() or not run:
            continue
        info = directory.lstat(name)
        if info is None:
            continue
        stale = time.time() - info.st_ctime > RESERVATION_STALE  # a rename sets ctime
        pid = int(pid_text)
        if not stale:
            if pid == os.getpid():
                continue
            try:
                os.kill(pid, 0)
                continue  # its process is still writing; it settles the reservation itself
            except ProcessLookupError:
                pass
            except OSError:
                continue
        try:
            directory.rename(name, f"result-{run}")
        except StateError:
            pass


def format_result(data: dict[str, Any], *, late: bool, earlier: bool = False) -> str:
    """The text a delivered result shows: a heading, when it ran, and its output.

    ``late``: delivered after the digest was composed (prompt hook); ``earlier``: a result of
    an earlier run delivered by this digest (its own run has not finished).
    """
    name = str(data.get("name", "?"))
    title = str(data.get("title") or name)
    status = str(data.get("status", "?"))
    raw_seconds = data.get("seconds")
    seconds = float(raw_seconds) if isinstance(raw_seconds, (int, float)) else 0.0
    when = ""
    finished = data.get("finished")
    if isinstance(finished, (int, float)) and not isinstance(finished, bool):
        when = f", finished {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(finished))}"
    label = name if title == name else f"{name}: {title}"
    # A result file is read back from the state dir: untrusted text like any stage output.
    head, hidden_head = clean(f"[deferred stage '{label}': {status} in {seconds:.1f}s{when}]")
    if earlier:
        note = "This is the result of an EARLIER run, started by a previous digest."
    elif late:
        note = ("It ran AFTER the sections above were composed; it was not part of the "
                "digest's start.")
    else:
        note = "It ran off the startup path."
    output, hidden = clean(str(data.get("output", "")))
    output = output.rstrip("\n") or "(no output: nothing to report)"
    removed = removed_note(hidden + hidden_head, f"the result of deferred stage '{name}'")
    return f"{head}\n{note}\n{removed + chr(10) if removed else ''}{output}"


def _stage_dirs(state_dir: StrPath) -> Iterator[tuple[str, StateDir]]:
    """``(stage name, folder)`` for each deferred stage folder, sorted. Never raises."""
    from ..state._statedir import open_subpath

    try:
        base = open_subpath(state_dir, (DEFERRED_DIR,))
    except StateError:
        return
    if base is None:
        return
    with base:
        for name in _records(base, "*"):
            try:  # only real folders: a file or link in deferred/ is not ours and is skipped
                st = base.lstat(name)
                if st is None or not stat.S_ISDIR(st.st_mode):
                    continue
                sub = base.sub(name)
            except StateError:
                continue
            if sub is not None:
                yield name, sub


def _fingerprint(data: dict[str, Any]) -> str:
    """SHA-256 hex of a result's status and output: what the model would read twice."""
    from .._hashing import sha256

    text = f"{data.get('status', '')}\0{data.get('output', '')}"
    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _remember_shown(context: SessionContext, stage: str, run_id: str | None,
                    earlier: dict[str, Any]) -> None:
    """Record that the digest of ``context.session_id``, whose run ``run_id`` of ``stage`` is in
    progress, showed the earlier result ``earlier``: ``shown-<run_id>.json`` (signed), written
    only once the digest was delivered (``context.delivery``; at once without one). Never
    raises: without it the later result is shown whole."""
    if not run_id or not context.session_id:
        return
    from ..state._signing import seal

    key = result_key(create=False)
    if key is None:
        return
    record = seal({"run_id": run_id, "session": context.session_id,
                   "shows": _fingerprint(earlier), "earlier": str(earlier.get("run_id", ""))}, key)
    state_dir = context.state_dir

    def write() -> None:
        try:
            directory = open_stage_dir(state_dir, stage)
            if directory is not None:
                with directory:
                    for old in _records(directory, "shown-*.json"):
                        directory.remove(old)  # one digest's promise at a time
                    directory.write_json(f"shown-{run_id}.json", record)
        except StateError as err:
            raise OSError(str(err)) from err

    delivery = context.delivery
    if delivery is None:
        try:
            write()
        except OSError:
            pass
    else:
        delivery.reserve(write, lambda: None)


def _shown_before(directory: StateDir, data: dict[str, Any], session_id: str,
                  key: bytes | None) -> bool:
    """Whether session ``session_id``'s digest already showed a result with ``data``'s status
    and output while ``data``'s run was in progress (:func:`_remember_shown`); the record is
    used up either way. Never raises."""
    from ..state._signing import genuine

    name = f"shown-{data.get('run_id')}.json"
    try:
        record = _read(directory, name)
        if record is None:
            return False
        directory.remove(name)
    except StateError:
        return False
    return (bool(session_id) and genuine(record, key) and record.get("session") == session_id
            and record.get("run_id") == data.get("run_id")
            and record.get("shows") == _fingerprint(data))


def _same_as_shown(data: dict[str, Any]) -> str:
    """The one line a result gets when the session already saw its output (:func:`_shown_before`)."""
    name = str(data.get("name", "?"))
    head, _hidden = clean(f"[deferred stage '{name}': {data.get('status', '?')}]")
    return (f"{head}\nIts run finished with the same result as the earlier run the "
            "session-start digest showed above: nothing new.")


def take_undelivered(state_dir: StrPath, caps: dict[str, int] | None = None,
                     session_id: str = "", delivery: OpenDelivery | None = None) -> list[str]:
    """Claim every finished, undelivered deferred result; return their texts (one per stage,
    the newest; older results of the same stage are superseded and dropped).

    Args:
        state_dir: the state dir.
        caps: result-file caps in bytes by the name of each stage the effective config marks
            deferred (:func:`result_cap` of the stage's output cap). A result in the folder of
            a stage not named here is refused: set aside as ``refused-…`` and named once.
        session_id: the session asking (its prompt hook); a result whose output its
            session-start digest already showed (:func:`_remember_shown`) is one line.
        delivery: the open delivery the claims commit with (:func:`_claim`); None: at once.

    Only results our runner signed (:func:`_genuine`) are delivered; others are refused the
    same way. Exactly once across concurrent callers (atomic rename). Fast when there is
    nothing: one ``listdir`` per deferred stage. Never raises.
    """
    texts = []
    key: bytes | None = None
    for name, directory in _stage_dirs(state_dir):
        with directory:
            if name not in (caps or {}):
                for result in _records(directory, "result-*.json"):
                    _refuse(directory, name, result, "no stage of that name is configured "
                            "deferred")
                continue
            if key is None and (_records(directory, "result-*.json")
                                or _records(directory, "reserved-*.json")):
                key = result_key(create=False)
            claimed = _claim_all(directory, (caps or {})[name], key, delivery)
            # older results of the same stage are superseded by the newest
            if claimed and _shown_before(directory, claimed[-1], session_id, key):
                texts.append(_same_as_shown(claimed[-1]))
            elif claimed:
                texts.append(format_result(claimed[-1], late=True))
    return texts


def _claim_all(directory: StateDir, cap: int, key: bytes | None,
               delivery: OpenDelivery | None = None) -> list[dict[str, Any]]:
    """Claim every genuine result in one stage's folder (others refused), with ``delivery``
    (:func:`_claim`); the claimed records, oldest first."""
    _release_orphans(directory)
    claimed = (_claim(directory, name, cap, key, delivery=delivery)
               for name in _records(directory, "result-*.json"))
    return [data for data in claimed if data is not None]


def pending(state_dir: StrPath, deferred: set[str] | None = None) -> list[dict[str, Any]]:
    """Finished deferred results not yet delivered, read without claiming them (for
    ``supervise status``); each is the result record (name, status, seconds, finished, ...).
    Only genuine results (:func:`_genuine`) of stages in ``deferred`` (names the effective
    config marks deferred; None: any) are listed; others are refused (set aside, named once).
    Never raises."""
    found = []
    key = result_key(create=False)
    for name, directory in _stage_dirs(state_dir):
        with directory:
            for result in _records(directory, "result-*.json"):
                if deferred is not None and name not in deferred:
                    _refuse(directory, name, result, "no stage of that name is configured "
                            "deferred")
                    continue
                data = _read(directory, result, result_cap(None))
                if data is None:
                    continue
                if not _genuine(data, name, result[len("result-"):], key):
                    _refuse(directory, name, result, "it carries no valid signature of this "
                            "machine's runner (planted or copied)")
                    continue
                found.append(data)
    return found


def running(state_dir: StrPath) -> list[dict[str, Any]]:
    """Deferred runners still alive (their ``running.json`` records). Never raises."""
    found = []
    for _name, directory in _stage_dirs(state_dir):
        with directory:
            record = _read(directory, "running.json")
        if _runner_alive(record):
            assert record is not None
            found.append(record)
    return found


@record
class Delivery:
    """What a digest shows for one deferred stage: ``text`` (one block), and ``record``, the
    result record (status, exit_code, seconds, output, ...) when a result was delivered."""

    name: str
    text: str
    record: dict[str, Any] | None = None


def preview(specs: Sequence[StagePlan], context: SessionContext) -> list[Delivery]:
    """What a preview (``supervise digest`` without ``--session-start``) shows for its
    deferred stages: none is started and nothing is claimed (a run started here would
    supersede the result a session is waiting for); each block names the newest pending
    result, read as ``supervise status`` reads it (:func:`pending`). Never raises."""
    found = pending(context.state_dir, {spec.name for spec in specs})
    out = []
    for spec in specs:
        mine = sorted((d for d in found if d.get("name") == spec.name),
                      key=lambda d: str(d.get("run_id", "")))
        text = (f"PREVIEW: deferred stage '{spec.name}' is not started by a preview (a session "
                "start or `supervise digest --session-start` runs it)")
        if mine:
            text += ("; its pending result, delivered at the next session start:\n"
                     + format_result(mine[-1], late=False, earlier=True))
        out.append(Delivery(spec.name, text + ("" if mine else ".")))
    return out


def collect(specs: Sequence[StagePlan], context: SessionContext,
            launches: Sequence[Launch]) -> list[Delivery]:
    """What the digest shows for its deferred stages, at its end, one block per stage: this
    run's result when it finished in time; else one ``IN PROGRESS`` block, carrying the newest
    undelivered result of an earlier run when there is one (older ones are superseded). An
    earlier run that ended without a result (disk full, runner killed) is named first, once
    (``LOST: ...``)."""
    out = []
    caps = {spec.name: result_cap(spec.max_output) for spec in specs}
    for launch in launches:
        if launch.error is not None:
            out.append(Delivery(launch.name, f"[supervise] deferred stage '{launch.name}' could "
                                f"not be launched: {launch.error}"))
            continue
        lost = "".join(t + "\n" for t in launch.lost)
        try:
            directory = open_stage_dir(context.state_dir, launch.name)
        except StateError:
            directory = None
        claimed: list[dict[str, Any]] = []
        if directory is not None:
            with directory:
                claimed = _claim_all(directory, caps.get(launch.name, result_cap(None)),
                                     result_key(create=False), context.delivery)
        ours = [d for d in claimed if d.get("run_id") == launch.run_id]
        if ours:
            out.append(Delivery(launch.name, lost + format_result(ours[-1], late=False), ours[-1]))
            continue
        age = time.time() - launch.started
        text = (f"IN PROGRESS: deferred stage '{launch.name}'"
                f"{'' if launch.title == launch.name else f' ({launch.title})'} has not finished "
                f"(running {age:.1f}s of its {launch.deadline:g}s deadline). NOT yet confirmed: "
                f"{launch.title}. Its result will be delivered once, later (next prompt or next "
                f"digest); `supervise status` shows it.")
        earlier = claimed[-1] if claimed else None
        if earlier is not None:
            text += "\n" + format_result(earlier, late=False, earlier=True)
            _remember_shown(context, launch.name, launch.run_id, earlier)
        out.append(Delivery(launch.name, lost + text, earlier))
    return out
