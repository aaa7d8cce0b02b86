"""The error taxonomy: one base, translated at the boundary, with actionable one-line text."""

from __future__ import annotations


class SupervisorError(Exception):
    """Base of every error watchkeeper raises on purpose; ``str()`` is one actionable line.

    The message often quotes untrusted text (a stage name from ``supervise.toml``, a path in
    the project tree): every hidden character in it (``supervisor._sanitize.escape``: escape
    sequences, controls, bidi and invisible characters) is written as its escape, ``\\u202e``,
    so it can neither reorder nor hide the line in a terminal nor reach the model as such;
    a line feed is written ``\\n`` (the message stays one line: no forged second line).
    """

    def __init__(self, message: str = "", *args: object) -> None:
        from ._sanitize import one_line

        super().__init__(one_line(str(message)), *args)


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


def describe_os_error(err: OSError) -> str:
    """An OS error in one line, for a person: ``"No space left on device (ENOSPC)"``; a
    reader that left is ``"the reader closed the pipe (EPIPE)"``; an error without a number
    is its text (or its class name). Used wherever output could not be written: a terminal
    verb's stdout (:mod:`supervisor.commands._stdio`), the hook's envelope
    (:func:`supervisor.state._delivery.write_whole`), the digest's sink."""
    import errno

    if err.errno == errno.EPIPE:
        return "the reader closed the pipe (EPIPE)"
    name = errno.errorcode.get(err.errno or 0, "")
    text = err.strerror or str(err) or type(err).__name__
    return f"{text} ({name})" if name else text
