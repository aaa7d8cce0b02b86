"""Bounds on the numbers a user gives (budget, grace), stdlib only: ``supervise run`` checks
its flags before anything heavy is imported."""

from __future__ import annotations

MAX_SECONDS = 86400.0
"""Largest ``budget``, ``timeout`` or ``SUPERVISE_TIMEOUT`` accepted (a day): more is a typo,
and ``inf`` or ``nan`` would break the deadline arithmetic (a crash at the first signal)."""
MAX_GRACE = 600.0
"""Largest ``grace`` accepted, in seconds."""
