"""Argument helpers the argparse verbs share (``config``, ``status``, ``doctor``, ``install``,
``uninstall``): one ``-C DIR`` check, the format option, a one-line error.

The verbs a harness or an extension calls often (``hook``, ``nudge``, ``digest``, ``run``,
``bridge``) use the table-driven parser of :mod:`supervisor.commands._args` instead, without
argparse's import; the ``-C DIR`` rule is that module's (:func:`supervisor.commands._args.existing_dir`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from .._sanitize import short
from . import _args


def existing_dir(value: str) -> Path:
    """argparse ``type=`` for ``-C DIR``: :func:`supervisor.commands._args.existing_dir`.

    Raises:
        argparse.ArgumentTypeError: ``DIR`` is missing or not a directory (argparse prints it
            as ``supervise VERB: error: argument -C/--project: ...`` and exits 2).
    """
    try:
        return _args.existing_dir(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{value}: {err}") from None


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
