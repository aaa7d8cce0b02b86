"""The table-driven argument parser of `hook`, `nudge`, `digest`, `run` and `bridge`
(`supervisor/commands/_args.py`): one grammar, tolerant or strict, `--help` from the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_cli
from supervisor.commands import _args, bridge, digest, hook, run


def _run_args(argv: list[str]) -> tuple[object, ...]:
    args = run.RunArgs()
    parsed = _args.parse(run.RUN, argv, args)
    return args.budget, args.grace, args.format, args.command, parsed.problems


@pytest.mark.parametrize("argv, expected", [
    ([], (120.0, 1.0, "text", [], ())),
    (["--budget=5", "--grace", "0.5", "--format=json", "--", "x"], (5.0, 0.5, "json", ["x"], ())),
    (["x", "--budget", "5"], (120.0, 1.0, "text", ["x", "--budget", "5"], ())),  # CMD's own
    (["--", "--budget", "5"], (120.0, 1.0, "text", ["--budget", "5"], ())),
    (["--", "--", "x"], (120.0, 1.0, "text", ["--", "x"], ())),
    (["--budget", "-1", "x"], (-1.0, 1.0, "text", ["x"], ())),  # a negative number is a value
    (["--budget", "5", "--budget", "6", "x"], (6.0, 1.0, "text", ["x"], ())),  # the last wins
    (["-", "x"], (120.0, 1.0, "text", ["-", "x"], ())),
    (["--bud", "5", "x"], (120.0, 1.0, "text", ["5", "x"], ("unexpected argument '--bud'",))),
    (["--budget"], (120.0, 1.0, "text", [], ("--budget needs a value",))),
    (["--budget", "--", "x"], (120.0, 1.0, "text", ["x"], ("--budget needs a value",))),
    (["--grace", "abc", "x"], (120.0, 1.0, "text", ["x"],
                               ("argument --grace: abc: not a number of seconds",))),
    (["--format", "xml", "x"], (120.0, 1.0, "text", ["x"],
                                ("unknown --format 'xml' (known: text, json)",))),
])
def test_the_grammar(argv: list[str], expected: tuple[object, ...]) -> None:
    assert _run_args(argv) == expected


def test_tolerant_mode_keeps_the_rest_and_lists_every_problem() -> None:
    """The hook never exits on a bad argument: each problem is one line, the good arguments
    still count, and any number of stray words is one line."""
    args = hook.parse_hook_args(["claude", "--source", "--event", "bogus", "--take-lock=1",
                                 "--registered-timeout", "0", "--take-lock", "extra"])
    assert (args.harness, args.source, args.event, args.take_lock) == (
        "claude", None, "session-start", True)
    assert args.problems == (
        "unexpected argument 'extra'", "--source needs a value",
        f"unknown --event 'bogus' (known: {', '.join(hook.EVENTS)})",
        "--take-lock takes no value (got '1')",
        "argument --registered-timeout: 0: not a positive number of seconds")
    many = hook.parse_hook_args(["claude", *["a"] * 100_000])
    assert many.problems == ("unexpected arguments 'a', 'a', 'a' and 99997 more",)
    assert hook.parse_hook_args(["--", "--odd harness"]).harness == "--odd harness"
    assert hook.parse_hook_args(["claude", "--take-lock"], "nudge").problems == (
        "unexpected argument '--take-lock'",)  # nudge's table has no options


def test_strict_values_are_read_by_the_table(tmp_path: Path) -> None:
    """`digest`: repeatable `--only`, `-C DIR` made absolute (also `-CDIR`), a bad directory
    or choice refused with one line."""
    (tmp_path / "sub dir").mkdir()
    args = digest.DigestArgs()
    parsed = _args.parse(digest.command(), ["--only", "a", "--only", "b c", f"-C{tmp_path}",
                                            "--format=json", "--source", "compact"], args)
    assert parsed.problems == ()
    assert (args.only, args.directory, args.format, args.source) == (
        ["a", "b c"], tmp_path, "json", "compact")
    for argv, problem in [(["-C", str(tmp_path / "nope")], "no such directory"),
                          (["--harness", "terminal"], "unknown --harness 'terminal'"),
                          (["--only", "--format"], "--only needs a value"),
                          (["extra"], "unexpected argument 'extra'")]:
        got = _args.parse(digest.command(), argv, digest.DigestArgs())
        assert problem in got.problems[0], (argv, got)
        with pytest.raises(_args.UsageError):
            got.refuse()
    with pytest.raises(_args.UsageError, match="--harness is required"):
        bridge.parse_args(["--source", "startup"])


TABLES = {"hook": hook.HOOK, "nudge": hook.NUDGE, "digest": digest.command(), "run": run.RUN,
          "bridge": bridge.BRIDGE}


@pytest.mark.parametrize("verb", sorted(TABLES))
def test_help_is_written_from_the_table(tmp_path: Path, verb: str) -> None:
    """`supervise VERB --help` (exit 0) shows the usage line and every option the parse reads,
    with its value's name: there is no second declaration to drift from."""
    table = TABLES[verb]
    proc = run_cli(verb, "--help", cwd=tmp_path)
    text = proc.stdout.decode()
    assert proc.returncode == 0 and text == _args.format_help(table)
    assert text.startswith(_args.format_usage(table))
    for opt in table.options:
        shown = opt.value_name
        for flag in opt.flags:
            assert (f"{flag} {shown}" if opt.takes_value else flag) in text, flag
    if table.positional is not None:
        assert table.positional.metavar in text
    # The usage is said once: a description that opens with its own synopsis line
    # ("supervise run [--budget S] ...") printed it a second time under the generated one.
    after_usage = text[len(_args.format_usage(table)):]
    assert f"{table.prog} [" not in after_usage, after_usage.splitlines()[:3]
