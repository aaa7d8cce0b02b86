"""``python -m supervisor``."""

from __future__ import annotations

from ._main import entry

entry()
