"""The error taxonomy: one base, translated at the boundary, with actionable one-line text."""

from __future__ import annotations


class SupervisorError(Exception):
    """Base of every error watchkeeper raises on purpose; ``str()`` is one actionable line."""


class ConfigError(SupervisorError):
    """A configuration file or environment override is invalid; the text names file and key."""


class StateError(SupervisorError):
    """The state dir (``.supervise/``) cannot be used: unwritable, a symlink, or corrupt."""


class StageSpawnError(SupervisorError):
    """A stage's program could not be started (missing, not executable, bad cwd).

    Attributes:
        argv: the argv that failed, as a tuple of strings.
    """

    def __init__(self, message: str, argv: tuple[str, ...]) -> None:
        super().__init__(message)
        self.argv = argv
