"""cgroup v2 containment for stages (design rule 11), used automatically where delegated.

The root is ``SUPERVISE_CGROUP_ROOT`` when set (``off`` disables cgroups), else, on Linux, our
own cgroup v2 directory when it is a **delegated subtree**: not the hierarchy's root, owned by
our user and writable (what systemd gives a user session's ``user@.service`` and the scopes
under it). Each stage then runs in a cgroup of its own: a tiny ``sh`` wrapper moves itself
into the cgroup *before* it ``exec``\\ s the stage, so no fork can slip out first. Membership
is then a cgroup, not a pgid or an environment token: a double-forked, ``setsid``,
environment-clearing daemon still dies (systemd's ``KillMode=control-group``), the kill is
``cgroup.freeze`` + ``cgroup.kill`` (whole, atomic), and where the ``pids`` / ``memory``
controllers are enabled for the root's children, ``max_tasks`` / ``max_memory`` become
``pids.max`` / ``memory.max``. Anything unusable falls back silently to the process-group +
subreaper + token sweep.
"""

from __future__ import annotations

import os

from ._reaper import PORTABLE

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: `supervise run`'s lean path imports this
if TYPE_CHECKING:
    from pathlib import Path

ROOT_VAR = "SUPERVISE_CGROUP_ROOT"
_WRAPPER = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
_OFF = ("off", "none", "0", "no", "false")


def _cgroup2_mount(mounts: str) -> Path | None:
    from pathlib import Path

    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def _own_cgroup(proc_cgroup: str) -> str | None:
    """Our cgroup v2 path relative to the hierarchy (from ``/proc/self/cgroup``), or None when
    there is none or it is the hierarchy's root (the whole machine's, never used implicitly)."""
    rel = next((line[3:] for line in proc_cgroup.splitlines() if line.startswith("0::")), None)
    if rel is None or rel.strip("/") == "" or ".." in rel.split("/"):
        return None
    return rel


def delegated_root(proc_cgroup: str, mounts: str, uid: int) -> Path | None:
    """Our own cgroup v2 directory when it is a delegated subtree we may use, else None.

    Args:
        proc_cgroup: the text of ``/proc/self/cgroup``.
        mounts: the text of ``/proc/mounts``.
        uid: our effective uid.

    The hierarchy's root (``0::/``) is the whole machine's and is never used implicitly.
    """
    rel = _own_cgroup(proc_cgroup)
    mount = None if rel is None else _cgroup2_mount(mounts)
    if mount is None or rel is None:
        return None
    path = mount / rel.strip("/")
    try:
        st = path.stat()
    except OSError:
        return None
    if st.st_uid != uid or not os.access(path, os.W_OK) or not (path / "cgroup.kill").exists():
        return None
    return path


def cgroup_root() -> Path | None:
    """The cgroup v2 root stages' cgroups go under, or None for the sweep (never raises).
    Where none can exist (portable, ``SUPERVISE_CGROUP_ROOT=off``, our cgroup is the
    hierarchy's root) it answers from ``/proc/self/cgroup`` alone, without ``pathlib``."""
    if PORTABLE:  # the portable path forced on Linux: no cgroup, as on macOS
        return None
    raw = os.environ.get(ROOT_VAR)
    if raw is not None and raw.strip().lower() in _OFF:
        return None
    if raw:
        from pathlib import Path

        root = Path(raw)
    else:
        try:
            with open("/proc/self/cgroup") as f:
                own = f.read()
            if _own_cgroup(own) is None:
                return None
            with open("/proc/mounts") as f:
                mounts = f.read()
        except OSError:
            return None
        found = delegated_root(own, mounts, os.geteuid())
        if found is None:
            return None
        root = found
    if not (root / "cgroup.procs").is_file() or not os.access(root, os.W_OK):
        return None
    return root


def create(root: Path, max_tasks: int | None = None, max_memory: int | None = None) -> Path | None:
    """Make a fresh child cgroup under ``root`` for one stage; None when that fails or the
    kernel offers no ``cgroup.kill`` there. ``max_tasks`` / ``max_memory`` (bytes) are
    written to ``pids.max`` / ``memory.max`` where those controllers are enabled (else the
    watchdog enforces them)."""
    path = root / f"supervise.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        path.mkdir()
    except OSError:
        return None
    if not (path / "cgroup.kill").exists():
        remove(path)
        return None
    for name, value in (("pids.max", max_tasks), ("memory.max", max_memory)):
        if value is not None and (path / name).exists():
            _write(path / name, str(value))
    if max_memory is not None and (path / "memory.oom.group").exists():
        _write(path / "memory.oom.group", "1")
    return path


def wrap(path: Path, argv: list[str]) -> list[str]:
    """``argv`` prefixed by the wrapper that joins cgroup ``path`` before ``exec``."""
    return ["/bin/sh", "-c", _WRAPPER, str(path), *argv]


def pids(path: Path) -> list[int]:
    """Pids currently in the cgroup (empty when it is gone or unreadable)."""
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _write(path: Path, text: str) -> bool:
    try:
        path.write_text(text)
        return True
    except OSError:
        return False


def signal_all(path: Path, sig: int) -> None:
    """Send ``sig`` to every process in the cgroup now. Never raises."""
    for pid in pids(path):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def freeze(path: Path) -> None:
    """Freeze every process in the cgroup at once (``cgroup.freeze``): none can fork."""
    _write(path / "cgroup.freeze", "1")


def kill(path: Path) -> None:
    """SIGKILL every process in the cgroup at once (``cgroup.kill``; frozen ones too)."""
    _write(path / "cgroup.kill", "1")


def _events(path: Path) -> dict[str, int]:
    try:
        text = path.read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def over_cap(path: Path) -> str | None:
    """``"max_tasks"`` when ``pids.max`` refused a fork, ``"max_memory"`` when ``memory.max``
    caused an OOM kill, else None."""
    if _events(path / "pids.events").get("max", 0) > 0:
        return "max_tasks"
    memory = _events(path / "memory.events")
    if memory.get("oom_kill", 0) > 0 or memory.get("max", 0) > 0 and memory.get("oom", 0) > 0:
        return "max_memory"
    return None


def remove(path: Path) -> bool:
    """Try to remove the (empty) cgroup; True when it is gone. Never raises."""
    try:
        path.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
