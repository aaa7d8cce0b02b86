"""Records we replay into context carry our signature: a keyed BLAKE2b under a per-user key.

The state dir lives in the project, so a cloned repository, a teammate's commit or a process
below the harness can plant any record there, and every input of its name is readable to
them. A record whose text (or whose list of files) becomes the model's context is therefore
used only when it carries ``sig``, the keyed hash of the record under this user's secret: 32
random bytes in ``$XDG_STATE_HOME/watchkeeper/deferred.key`` (``~/.local/state/...``, mode
0600, never a link, never in a project). Deferred results, start records
(:mod:`supervisor.session._starts`) and refresh baselines (:mod:`supervisor.session._refresh`)
are signed with it. With no home (:func:`supervisor._home.xdg_dir` None) there is no key:
nothing is signed, and nothing is replayed.

Stdlib and base only (``_hashing`` has no ``hashlib`` import): the hook's hot path uses it.
"""

from __future__ import annotations

import os
import stat

from .. import _jsontext

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Any

__all__ = ["KEY_FILE", "genuine", "key_path", "seal", "signature", "user_key"]

KEY_FILE = "deferred.key"
"""The per-user secret's file name under ``$XDG_STATE_HOME/watchkeeper/`` (named for the
deferred results it signed first)."""


def key_path() -> str | None:
    """Where the per-user key lives (:data:`KEY_FILE`); None when there is no home."""
    from .._home import xdg_dir

    base = xdg_dir("XDG_STATE_HOME", ".local", "state")
    return None if base is None else os.path.join(base, "watchkeeper", KEY_FILE)


def user_key(*, create: bool) -> bytes | None:
    """The per-user key (32 bytes); None when absent (and not ``create``) or unusable (a
    link, a wrong size, a file other users can read or another user owns).

    Raises:
        OSError: ``create`` and the key cannot be made (an unwritable home; no home at all is
            ``FileNotFoundError`` naming it).
    """
    path = key_path()
    if path is None:
        if create:
            raise FileNotFoundError("no home directory (HOME unset, empty or relative, no "
                                    "XDG_STATE_HOME) to keep the per-user key in")
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _attempt in range(2):
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            if not create:
                return None
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue  # another process made it first: read theirs
            try:
                os.write(fd, os.urandom(32))
                os.fsync(fd)
            finally:
                os.close(fd)
            continue
        except OSError:
            if create:
                raise
            return None
        try:
            info = os.fstat(fd)
            if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                    or info.st_mode & 0o077):
                return None
            key = os.read(fd, 64)
        finally:
            os.close(fd)
        return key if len(key) == 32 else None
    return None


def signature(record: dict[str, Any], key: bytes) -> str:
    """Keyed BLAKE2b (32 bytes, hex) of ``record`` without its ``sig`` field (JSON, keys
    sorted)."""
    from .._hashing import blake2b

    body = {k: v for k, v in record.items() if k != "sig"}
    raw = _jsontext.dumps(body, ensure_ascii=False, sort_keys=True).encode("utf-8", "replace")
    return blake2b(raw, key=key, digest_size=32).hexdigest()


def seal(record: dict[str, Any], key: bytes) -> dict[str, Any]:
    """``record`` with ``sig`` set to its :func:`signature`."""
    return {**record, "sig": signature(record, key)}


def genuine(record: object, key: bytes | None) -> bool:
    """True when ``record`` is a mapping whose ``sig`` is its :func:`signature` under ``key``
    (constant-time compare); False without a key."""
    from .._hashing import compare_digest

    if key is None or not isinstance(record, dict):
        return False
    sig = record.get("sig")
    return isinstance(sig, str) and compare_digest(sig, signature(record, key))
