"""SHA-256, BLAKE2b and a constant-time compare without ``hashlib``'s import cost.

``import hashlib`` builds its table of OpenSSL constructors at import, a noticeable share of a
Python hook's CPU (docs/benchmarks.md, rows "post-tool hook injecting a nested AGENTS.md" and
"SessionStart hook on an empty digest"). CPython's built-in modules behind it (``_sha256`` on
3.11, ``_sha2`` from 3.12; ``_blake2``) cost a fraction of that and compute the same digests; when
an interpreter lacks them (a build without them, a later rename) ``hashlib`` is used instead.
Both return hash objects with the ``hashlib`` interface (``update``, ``digest``,
``hexdigest``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from hashlib import _Hash
    from hashlib import blake2b as Blake2b
    from typing import Any


def _constructor(modules: tuple[str, ...], name: str, fallback: tuple[str, str] | None = None) -> Any:
    """``name`` from the first of ``modules`` that has it, else ``fallback`` (module, name),
    by default ``hashlib.<name>``."""
    for module in modules:
        try:
            return getattr(__import__(module), name)
        except (ImportError, AttributeError):
            continue
    module, attr = fallback or ("hashlib", name)
    return getattr(__import__(module), attr)


def sha256(data: bytes = b"") -> _Hash:
    """A SHA-256 hash object over ``data`` (as ``hashlib.sha256``)."""
    hashed: _Hash = _constructor(("_sha256", "_sha2"), "sha256")(data)  # 3.11, 3.12+
    return hashed


def blake2b(data: bytes, *, key: bytes = b"", digest_size: int = 64) -> Blake2b:
    """A BLAKE2b hash object over ``data`` (as ``hashlib.blake2b``); ``key`` up to 64 bytes,
    ``digest_size`` 1 to 64 bytes.

    Raises:
        ValueError: ``key`` or ``digest_size`` out of range.
    """
    hashed: Blake2b = _constructor(("_blake2",), "blake2b")(data, key=key, digest_size=digest_size)
    return hashed


def compare_digest(a: str, b: str) -> bool:
    """``a == b`` for ASCII strings (hex digests), in time independent of where they differ:
    ``hmac.compare_digest``, whose module imports ``hashlib``.

    Raises:
        TypeError: a string holds a non-ASCII character.
    """
    same: bool = _constructor(("_operator",), "_compare_digest", ("hmac", "compare_digest"))(a, b)
    return same
