"""Argument helpers every verb shares: one ``-C DIR`` check, the format option, ``--help``
for the harness-facing verbs (which must never exit on a bad argument).

Stdlib only: ``hook`` and ``nudge`` import it on the hot path.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NoReturn

from .._sanitize import short


def existing_dir(value: str) -> Path:
    """argparse ``type=`` for ``-C DIR``: an existing directory, made absolute; never created.

    Raises:
        argparse.ArgumentTypeError: ``DIR`` is missing or not a directory (argparse prints it
            as ``supervise VERB: error: argument -C/--project: ...`` and exits 2).
    """
    path = Path(os.path.expanduser(value))  # never raises: Path's does for "~nouser"
    try:
        if not path.exists():
            raise argparse.ArgumentTypeError(f"{value}: no such directory")
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{value}: not a directory")
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{value}: cannot be read ({err.strerror})") from None
    return path.absolute()


def add_directory(parser: argparse.ArgumentParser) -> None:
    """Add ``-C DIR`` / ``--project DIR`` (``args.directory``, an absolute Path or None)."""
    parser.add_argument("-C", "--project", dest="directory", type=existing_dir, default=None,
                        metavar="DIR", help="run as if started in DIR, which must exist "
                        "(default: the current directory); the project is its git top level")


def add_format(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--format text|json`` (``args.format``); ``what`` names what is printed."""
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help=f"print {what} as text for a person (default) or as one JSON "
                        "document for a program")


class VerbParser(argparse.ArgumentParser):
    """The terminal verbs' parser: argparse's usage line and exit status 2, with the error
    made one readable line (:func:`short`)."""

    def error(self, message: str) -> NoReturn:
        """Print the usage and ``message`` (shortened) on stderr; exit 2."""
        super().error(short(message))


class ArgumentProblem(Exception):
    """A bad argument to a verb that must not exit on one (``hook``, ``nudge``)."""


class TolerantParser(VerbParser):
    """An argparse parser that raises :class:`ArgumentProblem` instead of exiting: a harness
    path reports a bad argument on stderr and carries on (it always exits 0)."""

    def error(self, message: str) -> NoReturn:
        """Raise :class:`ArgumentProblem` with argparse's ``message`` (shortened)."""
        raise ArgumentProblem(short(message))
