"""Named exit codes (pre-commit / pipx style)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
"""An expected failure: a check failed, a bad config in a terminal verb, or a terminal verb's
output could not be written (``ENOSPC``, ``EIO``, stdout closed; a reader that left, ``EPIPE``,
is not a failure)."""
EXIT_USAGE = 2
"""Bad command-line usage (argparse's convention)."""
EXIT_UNEXPECTED = 3
"""An internal error in a terminal verb. Hook verbs never return it (they exit 0)."""
EXIT_STAND_DOWN = 3
"""Bridge prerequisite mode only: an intentional stand-down (gate or scope). Never on a
harness-facing path."""
EXIT_TIMEOUT = 124
"""``supervise run``: the command was killed at its budget (like GNU ``timeout``)."""
EXIT_RUN_FAILURE = 125
"""``supervise run``: our own failure (a usage error, its JSON document not written), as GNU
``timeout``'s 125."""
EXIT_SIGINT = 130
"""A terminal verb interrupted (Ctrl-C): 128 + ``SIGINT``; any signal n that asks a terminal
verb to stop ends it with 128 + n (``SIGTERM`` 143, ``SIGHUP`` 129), never a traceback."""
EXIT_SIGTERM = 143
