"""Optional cgroup v2 containment for stages (design rule 11).

When ``SUPERVISE_CGROUP_ROOT`` names a writable, delegated cgroup v2 directory whose children
offer ``cgroup.kill`` (Linux >= 5.14), each stage runs in a cgroup of its own: a tiny ``sh``
wrapper moves itself into the cgroup *before* it ``exec``\\ s the stage, so no fork can slip out
first. Membership is then a cgroup, not a pgid or an environment token: a double-forked,
``setsid``, environment-clearing daemon still dies (systemd's ``KillMode=control-group``).
Anything unusable falls back silently to the process-group + subreaper + token sweep.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

ROOT_VAR = "SUPERVISE_CGROUP_ROOT"
_WRAPPER = 'echo $$ > "$0/cgroup.procs" && exec "$@"'


def cgroup_root() -> Path | None:
    """The configured cgroup v2 root when it is usable, else None (never raises)."""
    raw = os.environ.get(ROOT_VAR)
    if not raw:
        return None
    root = Path(raw)
    if not (root / "cgroup.procs").is_file() or not os.access(root, os.W_OK):
        return None
    return root


def create(root: Path) -> Path | None:
    """Make a fresh child cgroup under ``root`` for one stage; None when that fails or the
    kernel offers no ``cgroup.kill`` there."""
    path = root / f"supervise.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError:
        return None
    if not (path / "cgroup.kill").exists():
        remove(path)
        return None
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


def kill(path: Path) -> None:
    """SIGKILL every process in the cgroup at once (``cgroup.kill``)."""
    try:
        (path / "cgroup.kill").write_text("1")
    except OSError:
        pass


def remove(path: Path) -> bool:
    """Try to remove the (empty) cgroup; True when it is gone. Never raises."""
    try:
        path.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
