"""One table-driven argument parser for the verbs harnesses and extensions call often: ``hook``,
``nudge``, ``digest``, ``run`` and ``bridge``.

Each verb declares its options once, in a :class:`Command`; :func:`parse` reads an argv from
that table into the verb's arguments record, and :func:`format_help` / :func:`format_usage`
write ``--help`` and the usage line from the same table. Two modes, one grammar:

- **tolerant** (``hook``, ``nudge``: a harness path never exits on a bad argument): every
  problem is listed in :attr:`Parsed.problems`, one line each, and the rest of argv is kept;
- **strict** (``digest``, ``run``, ``bridge``): the caller refuses the argv on the first
  problem (:meth:`Parsed.refuse` raises :class:`UsageError`; the verb prints the usage line
  and the error, or, for the bridge, a ``failed`` document).

The grammar: ``--opt VALUE`` or ``--opt=VALUE`` (a short option also ``-CVALUE``); a word that
reads as an option (``-x``, ``--x``; not ``-`` nor a negative number) is never taken as a
value; the last value given wins, a repeatable option collects its values in order; a flag
takes no value; ``-h``/``--help`` asks for the help; after ``--`` every word is positional; a
verb's one positional takes the first positional word, and a *rest* positional (``run``'s
command) every word from there on, as it is. No abbreviations (``--bud`` is not ``--budget``).

Stdlib only and without argparse, whose import (``gettext``, its help formatter, ``shutil``)
would cost every hook event, session start and bridge call (``tests/test_hook_args.py``,
``tests/test_digest_start.py`` and ``tests/test_exports.py`` keep it off those paths).
``textwrap`` is imported for ``--help`` only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

HELP = ("-h", "--help")
WIDTH = 80
"""Columns ``--help`` is wrapped to (argparse's width on a terminal of 82)."""
_COLUMN = 24
"""Where an option's help text starts in ``--help`` (argparse's column)."""


class UsageError(ValueError):
    """A strict verb's bad argument: ``str(err)`` is one line (no usage, no program name)."""


class Option:
    """One option of a verb.

    ``flags`` are its spellings (``("-C", "--project")``), ``dest`` the field of the verb's
    arguments record it sets, ``help`` one sentence for ``--help`` (``{default}`` there is
    replaced by the record's default). It takes a value when it has a ``metavar`` or
    ``choices``, else it is a flag (set to True). ``choices`` are the values allowed (``()``:
    any); ``convert`` reads the value (a ``str`` in, the field's value out; raises
    :class:`ValueError` whose text says what is wrong, ``"not a number of seconds"``);
    ``repeat`` collects every value in a list; ``required`` makes its absence a problem.
    A plain class, not a record: ``supervise run -- true`` does not import :mod:`supervisor._record`.
    """

    __slots__ = ("flags", "dest", "help", "metavar", "choices", "convert", "repeat", "required")

    def __init__(self, flags: tuple[str, ...], dest: str, help: str, *, metavar: str = "",
                 choices: tuple[str, ...] = (), convert: Callable[[str], object] | None = None,
                 repeat: bool = False, required: bool = False) -> None:
        self.flags, self.dest, self.help, self.metavar = flags, dest, help, metavar
        self.choices, self.convert, self.repeat, self.required = choices, convert, repeat, required

    @property
    def takes_value(self) -> bool:
        """Whether it takes a value (a metavar or choices), rather than being a flag."""
        return bool(self.metavar or self.choices)

    @property
    def value_name(self) -> str:
        """Its value's name in the usage line and ``--help``: the metavar, else
        ``{a,b}`` of its choices."""
        return self.metavar or "{" + ",".join(self.choices) + "}"


class Positional:
    """A verb's one positional argument: ``dest`` (the record field), ``metavar`` and ``help``
    for ``--help``; ``rest`` takes every word from the first positional one on (a list), and
    ``--`` before it, as in ``run -- CMD ARGS``."""

    __slots__ = ("dest", "metavar", "help", "rest")

    def __init__(self, dest: str, metavar: str, help: str, *, rest: bool = False) -> None:
        self.dest, self.metavar, self.help, self.rest = dest, metavar, help, rest


class Command:
    """A verb's table: ``prog`` (``"supervise digest"``), ``description`` (printed as written
    under the usage), ``options``, an optional ``positional``, and ``defaults``, the arguments
    record's class (its defaults fill ``{default}`` in the help)."""

    __slots__ = ("prog", "description", "options", "positional", "defaults")

    def __init__(self, prog: str, description: str, options: tuple[Option, ...],
                 positional: Positional | None = None, *,
                 defaults: Callable[[], object] | None = None) -> None:
        self.prog, self.description, self.options = prog, description, options
        self.positional, self.defaults = positional, defaults


class Parsed:
    """What :func:`parse` found besides the values: ``help`` (``-h``/``--help`` given) and
    ``problems``, one line each, in argv order (unexpected words first, as one line)."""

    __slots__ = ("help", "problems")

    def __init__(self, help: bool, problems: tuple[str, ...]) -> None:
        self.help, self.problems = help, problems

    def refuse(self) -> None:
        """Strict mode: raise :class:`UsageError` with the first problem, if any.

        Raises:
            UsageError: the argv had a problem."""
        if self.problems:
            raise UsageError(self.problems[0])


def is_option(arg: str) -> bool:
    """``arg`` reads as an option (``-x``, ``--x``), not a value: a lone ``-`` and a negative
    number are values, as argparse has them."""
    if not arg.startswith("-") or arg == "-":
        return False
    try:
        float(arg)
    except ValueError:
        return True
    return False


def shown(value: str | None) -> str:
    """``repr(value)`` as one line cut to 100 characters (:func:`supervisor._sanitize.short`;
    imported only when an argument is wrong)."""
    from .._sanitize import short

    return short(repr(value), 100)


def _escaped(value: str) -> str:
    """``value`` as written, its control characters and escape sequences as escapes, cut to
    100 characters (as argparse's verbs show a bad value: ``argument -C/--project: x: ...``)."""
    from .._sanitize import short

    return short(value, 100)


def parse(command: Command, argv: list[str], args: object) -> Parsed:
    """Read ``argv`` by ``command``'s table into ``args`` (a mutable record whose fields are
    the options' ``dest``; fields not given keep their defaults). Never raises, never exits:
    problems are returned (:meth:`Parsed.refuse` for strict mode). Linear in ``len(argv)``:
    100,000 stray words cost one pass and give one line."""
    by_flag = {flag: opt for opt in command.options for flag in opt.flags}
    pos = command.positional
    problems: list[str] = []
    unexpected: list[str] = []
    given: set[str] = set()
    asked_help = False
    positional_taken = False
    only_positional = False
    rest = argv[::-1]  # popped from the end: O(n), not O(n^2)
    while rest:
        arg = rest.pop()
        if not only_positional and arg == "--":
            only_positional = True
            continue
        if only_positional or not is_option(arg):
            if pos is None or positional_taken:
                unexpected.append(arg)
            elif pos.rest:
                setattr(args, pos.dest, [arg, *reversed(rest)])
                rest.clear()
            else:
                setattr(args, pos.dest, arg)
            positional_taken = True
            continue
        name, eq, value = arg.partition("=")
        if name in HELP and not eq:
            asked_help = True
            continue
        opt = by_flag.get(name)
        if opt is None and not arg.startswith("--"):  # -CVALUE
            short = by_flag.get(arg[:2])
            if short is not None and short.takes_value:
                opt, name, eq, value = short, arg[:2], "=", arg[2:]
        if opt is None:
            unexpected.append(arg)
            continue
        if not opt.takes_value:
            if eq:
                problems.append(f"{name} takes no value (got {shown(value)})")
            else:
                setattr(args, opt.dest, True)
                given.add(opt.dest)
            continue
        if not eq:
            if not rest or is_option(rest[-1]):
                problems.append(f"{name} needs a value")
                continue
            value = rest.pop()
        given.add(opt.dest)
        if opt.choices and value not in opt.choices:
            problems.append(f"unknown {name} {shown(value)} (known: {', '.join(opt.choices)})")
            continue
        converted: object = value
        if opt.convert is not None:
            try:
                converted = opt.convert(value)
            except ValueError as err:
                problems.append(f"argument {'/'.join(opt.flags)}: {_escaped(value)}: {err}")
                continue
        if opt.repeat:
            setattr(args, opt.dest, [*(getattr(args, opt.dest) or ()), converted])
        else:
            setattr(args, opt.dest, converted)
    if unexpected:  # one line, however many: a harness's stderr is not a place for 100,000
        more = f" and {len(unexpected) - 3} more" if len(unexpected) > 3 else ""
        problems.insert(0, f"unexpected argument{'s' if len(unexpected) > 1 else ''} "
                        f"{', '.join(shown(a) for a in unexpected[:3])}{more}")
    problems += [f"{opt.flags[-1]} is required" for opt in command.options
                 if opt.required and opt.dest not in given]
    return Parsed(asked_help, tuple(problems))


# -- readings of a value (``Option.convert``) --------------------------------------------------

def number(value: str) -> float:
    """A number of seconds, as ``float`` reads it (``" 7 "``, ``1e3``, ``nan`` included: the
    verb bounds it).

    Raises:
        ValueError: not a number."""
    try:
        return float(value)
    except ValueError:
        raise ValueError("not a number of seconds") from None


def positive_seconds(value: str) -> float:
    """A finite number of seconds above 0.

    Raises:
        ValueError: anything else."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise ValueError("not a positive number of seconds")
    return seconds


def a_path(value: str) -> Path:
    """``value`` as a :class:`pathlib.Path`, as written."""
    from pathlib import Path

    return Path(value)


def existing_dir(value: str) -> Path:
    """``-C DIR``: an existing directory, ``~`` expanded, made absolute; never created.

    Raises:
        ValueError: ``DIR`` is missing, not a directory or cannot be read (the text says which).
    """
    from pathlib import Path

    path = Path(os.path.expanduser(value))  # never raises: Path's does for "~nouser"
    try:
        if not path.exists():
            raise ValueError("no such directory")
        if not path.is_dir():
            raise ValueError("not a directory")
    except OSError as err:
        raise ValueError(f"cannot be read ({err.strerror})") from None
    return path.absolute()


# -- --help and the usage line ------------------------------------------------------------------

def _usage_items(command: Command) -> list[str]:
    items = ["[-h]"]
    for opt in command.options:
        spelled = opt.flags[0] + (f" {opt.value_name}" if opt.takes_value else "")
        items.append(spelled if opt.required else f"[{spelled}]")
    pos = command.positional
    if pos is not None:
        items.append(pos.metavar if pos.rest else f"[{pos.metavar}]")
    return items


def format_usage(command: Command) -> str:
    """``usage: PROG [-h] [--opt VALUE] ...`` wrapped to :data:`WIDTH`, continuation lines
    indented under the first option, ending in a newline."""
    head = f"usage: {command.prog} "
    lines, line = [], head
    for item in _usage_items(command):
        if len(line) + len(item) > WIDTH and line.strip() != head.strip():
            lines.append(line.rstrip())
            line = " " * len(head)
        line += item + " "
    lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def _entry(invocation: str, text: str) -> list[str]:
    import textwrap

    body = textwrap.wrap(text, WIDTH - _COLUMN) or [""]
    if len(invocation) + 2 <= _COLUMN - 2:
        first = f"  {invocation}".ljust(_COLUMN) + body[0]
        return [first, *(" " * _COLUMN + line for line in body[1:])]
    return [f"  {invocation}", *(" " * _COLUMN + line for line in body)]


def format_help(command: Command) -> str:
    """``--help`` from the table: the usage line, the description as written, the
    positional argument, then every option (``-h`` first) with its help, wrapped."""
    defaults = command.defaults() if command.defaults is not None else None
    out = [format_usage(command).rstrip("\n"), "", command.description.rstrip("\n"), ""]
    pos = command.positional
    if pos is not None:
        out += ["positional arguments:", *_entry(pos.metavar, pos.help), ""]
    out += ["options:", *_entry("-h, --help", "show this help message and exit")]
    for opt in command.options:
        value = f" {opt.value_name}" if opt.takes_value else ""
        text = opt.help
        if defaults is not None and "{default}" in text:
            default = getattr(defaults, opt.dest)
            text = text.replace("{default}", f"{default:g}" if isinstance(default, float)
                                else str(default))
        out += _entry(", ".join(flag + value for flag in opt.flags), text)
    return "\n".join(out) + "\n"


def refuse_usage(command: Command, err: UsageError) -> None:
    """Print a strict verb's refusal on stderr, as argparse did: the usage line, then
    ``PROG: error: MESSAGE``."""
    import sys

    sys.stderr.write(format_usage(command) + f"{command.prog}: error: {err}\n")
