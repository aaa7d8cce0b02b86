"""The hook's hand-rolled argument parse (no argparse on the per-event path) gives what
argparse (the ``--help`` parser, :func:`supervisor.commands.hook.build_parser`) gives."""

from __future__ import annotations

import argparse
import functools
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.commands._cli import ArgumentProblem
from supervisor.commands.hook import EVENTS, HookArgs, build_parser, parse_hook_args


@functools.cache
def _reference_parser(verb: str) -> argparse.ArgumentParser:
    # One parser per verb, reused: building it for each of the 8421 argument lists was most of
    # this test's cost (32 s of its 60 s timeout on a loaded host). A parse keeps no state in
    # the parser (each returns a fresh namespace).
    return build_parser(verb)


def argparse_reference(argv: list[str], verb: str) -> HookArgs:
    """The parse as argparse does it (the implementation before the hand-rolled one)."""
    args = HookArgs()
    problems: list[str] = []
    try:
        ns, extra = _reference_parser(verb).parse_known_args(argv)
    except ArgumentProblem as err:
        return HookArgs(problems=(str(err),))
    args.harness, args.help = ns.harness or "", ns.help
    problems += [f"unexpected argument {item!r}" for item in extra]
    if verb == "hook":
        args.take_lock, args.prerequisite = ns.take_lock, ns.prerequisite
        if "--source" in argv or any(a.startswith("--source=") for a in argv):
            if ns.source is None:
                problems.append("--source needs a value")
            else:
                args.source = ns.source
        if ns.registered_timeout is not None or "--registered-timeout" in argv:
            try:
                value = float(ns.registered_timeout)
            except (TypeError, ValueError):
                value = float("nan")
            if 0 < value < float("inf"):
                args.registered_timeout = value
            else:
                problems.append(f"--registered-timeout needs a positive number of seconds "
                                f"(got {ns.registered_timeout!r})")
        if ns.event is not None:
            if ns.event in EVENTS:
                args.event = ns.event
            else:
                problems.append(f"unknown --event {ns.event!r} (known: {', '.join(EVENTS)})")
        elif "--event" in argv:
            problems.append("--event needs a value")
    args.problems = tuple(problems)
    return args


TOKENS = ["claude", "codex", "--event", "prompt", "--event=post-tool", "bogus", "--source",
          "compact", "--source=", "--take-lock", "--prerequisite", "--registered-timeout",
          "30", "-5", "inf", "--registered-timeout=x", "-h", "--help", "--what", "-"]


def argvs() -> list[list[str]]:
    out: list[list[str]] = [[]]
    for n in (1, 2, 3):
        out += [list(combo) for combo in itertools.product(TOKENS, repeat=n)]
    return out


@pytest.mark.parametrize("verb", ["hook", "nudge"])
def test_hand_rolled_parse_matches_argparse(verb: str) -> None:
    """Every combination of up to three of the arguments a registration, a user or a typo
    gives: the same fields, and the same problems (each one an ignored argument)."""
    differ = []
    for argv in argvs():
        ours, theirs = parse_hook_args(argv, verb), argparse_reference(argv, verb)
        if (ours.harness, ours.source, ours.event, ours.take_lock, ours.prerequisite,
                ours.registered_timeout, ours.help) != (
                theirs.harness, theirs.source, theirs.event, theirs.take_lock,
                theirs.prerequisite, theirs.registered_timeout, theirs.help):
            differ.append((argv, ours, theirs))
        elif bool(ours.problems) != bool(theirs.problems):
            differ.append((argv, ours.problems, theirs.problems))
    assert not differ, differ[:5]


def test_registered_arguments_parse_without_problems() -> None:
    """What `supervise install` registers parses cleanly."""
    args = parse_hook_args(["claude", "--event", "post-tool", "--registered-timeout", "60"])
    assert (args.harness, args.event, args.registered_timeout, args.problems) == (
        "claude", "post-tool", 60.0, ())
    args = parse_hook_args(["--", "--odd harness"])
    assert args.harness == "--odd harness" and not args.problems


def test_hook_path_imports_no_argparse(tmp_path: Path) -> None:
    """The per-event hook reads its arguments without argparse (nor the gettext, shutil and
    locale its help formatter pulls in); `--help` still prints argparse's help."""
    argv = [sys.executable, "-X", "importtime", "-m", "supervisor", "hook", "claude",
            "--event", "prompt"]
    env = {"SUPERVISE_OFF": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for _ in range(2):  # the first run validates the config and fills the cache
        proc = subprocess.run(argv, input=b"{}", capture_output=True, cwd=tmp_path, timeout=60,
                              env=env)
        assert proc.returncode == 0
    loaded = {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()
              if line.startswith("import time:")}
    assert "supervisor.session._payload" in loaded  # the hook ran (import_module itself is not traced)
    assert not loaded & {"argparse", "gettext", "shutil"}, sorted(loaded & {"argparse", "gettext", "shutil"})
    helped = subprocess.run([sys.executable, "-m", "supervisor", "hook", "--help"],
                            capture_output=True, cwd=tmp_path, timeout=60)
    assert helped.returncode == 0 and b"--registered-timeout" in helped.stdout
