"""The hook's digest fitted to its inline cap as it streams (issue 26): `Spill` holds no
stage's output whole, and gives what `fit_inline` gives for the same digest."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import supervise_cmd

from supervisor.adapters import fit_inline
from supervisor.adapters._spill import Spill


def _streamed(parts: list[tuple[str, str]], cap: int, state_dir: Path, front: str = "",
              trailing: str = "", chunk: int = 7) -> str:
    """``parts`` fed to a Spill as the engine feeds its frame: front notice, each stage's
    text in ``chunk``-byte pieces cut on character boundaries, trailing notices."""
    spill = Spill(state_dir, cap, front)
    spill.begin([(name, None) for name, _text in parts])
    for index, (_name, text) in enumerate(parts):
        data = text.encode()
        at = 0
        while at < len(data):
            end = min(at + chunk, len(data))
            while end < len(data) and data[end] & 0xC0 == 0x80:
                end += 1
            piece = data[at:end]
            spill.stage(index, piece, piece.isascii() and "\t" not in text)
            at = end
        spill.end(index, None, False)
    if trailing:
        spill.write(trailing.encode())
    return spill.close()


def _unnamed(text: str) -> str:
    return re.sub(r"digest-[0-9a-f]{12}\.txt", "digest-NAME.txt", text)


CASES = [
    ("fits", [("a", "## A\none\n"), ("b", "## B\ntwo\n")], 9_000, "NOTE\n", ""),
    ("one big stage", [("a", "## A\n" + "a" * 20_000 + "\n"), ("b", "## B\nsmall\n")], 9_000,
     "", "STARTUP TRUNCATED banner\n"),
    ("stages that fit and not", [(f"s{i}", f"## S{i}\n" + "é" * (400 * i) + "\n")
                                 for i in range(12)], 9_000, "READ-ONLY\n", "tail\n"),
    ("many stages", [(f"s{i}", "x" * 50 + "\n") for i in range(60)], 1_000, "", ""),
    ("huge notices", [("a", "A" * 100 + "\n")], 2_000, "N" * 5_000 + "\n", ""),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_spill_gives_what_fit_inline_gives(tmp_path: Path, case: tuple) -> None:
    _name, parts, cap, front, trailing = case
    old = fit_inline(parts, cap, tmp_path / "old", notices=front + trailing)
    new = _streamed(parts, cap, tmp_path / "new", front, trailing)
    assert _unnamed(new) == _unnamed(old).replace(str(tmp_path / "old"), str(tmp_path / "new"))
    saved = list((tmp_path / "new" / "digests").glob("digest-*.txt"))
    if len(front + trailing + "".join(t for _n, t in parts)) <= cap:
        assert new == front + "".join(t for _n, t in parts) and not saved
    else:  # the file holds the digest as printed, named by its content
        assert len(saved) == 1 and str(saved[0]) in new
        assert saved[0].read_text() == front + "".join(t for _n, t in parts) + trailing
        from supervisor._hashing import sha256

        assert saved[0].name == f"digest-{sha256(saved[0].read_bytes()).hexdigest()[:12]}.txt"


def test_spill_into_an_unusable_state_dir_says_where_to_look(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the state dir should be")
    text = _streamed([("a", "A" * 3_000 + "\n"), ("b", "B" * 3_000 + "\n")], 4_000, blocker)
    assert len(text) <= 4_000 and "could not be saved" in text and "supervise digest" in text
    assert list(tmp_path.iterdir()) == [blocker]


def _flood_project(folder: Path, nbytes: int) -> bytes:
    folder.mkdir()
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    (folder / "supervise.toml").write_text(
        f"budget = 120\nmax_output = {2 * nbytes}\n[[stages]]\nname = \"flood\"\n"
        f"run = \"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {nbytes}\"\n"
        f"shell = true\nmax_output = {2 * nbytes}\n")
    return json.dumps({"session_id": "s", "cwd": str(folder), "source": "startup",
                       "hook_event_name": "SessionStart"}).encode()


def _hook_rss(folder: Path, payload: bytes, env: dict[str, str]) -> tuple[int, bytes]:
    """Run the SessionStart hook; its peak resident set in bytes (the kernel's ``ru_maxrss``
    of the finished child) and what it printed."""
    out = folder / "hook.out"
    with open(out, "wb") as f:
        proc = subprocess.Popen(supervise_cmd("hook", "claude"), cwd=folder, stdin=subprocess.PIPE,
                                stdout=f, stderr=subprocess.DEVNULL, env=env)
        assert proc.stdin is not None
        proc.stdin.write(payload)
        proc.stdin.close()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            proc.returncode = 0  # reaped above
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_maxrss * 1024, out.read_bytes()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB")
def test_a_hook_whose_stage_prints_64_mib_holds_a_window(tmp_path: Path) -> None:
    """The hook's digest of one stage printing 64 MiB goes to the saved file as it streams:
    the hook's peak resident set grows by less than a quarter of the output over the same
    hook with a 1 MiB stage (the code before held the output several times: about 4x), and
    the file holds every byte."""
    mib = 64
    env = {**os.environ, "SUPERVISE_STATE_DIR": str(tmp_path / "state")}
    small = _hook_rss(tmp_path / "small", _flood_project(tmp_path / "small", 1 << 20), env)[0]
    big, out = _hook_rss(tmp_path / "big", _flood_project(tmp_path / "big", mib << 20), env)
    text = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    saved = Path(re.search(r"in (/\S+digest-[0-9a-f]{12}\.txt)", text).group(1))
    assert len(text) <= 9_000 and f"{(mib << 20) + 1:,} characters" in text
    assert saved.stat().st_size == (mib << 20) + 1
    assert big - small < (mib << 20) // 4, f"peak RSS {big >> 20} MiB vs {small >> 20} MiB"


def test_a_locked_start_over_the_cap_streams_and_records_no_copy(tmp_path: Path,
                                                                 harnesses: object) -> None:
    """Below a harness (the lock taken, the start recorded for a repeat): a digest of 4 MiB
    prints the fitted text once, the saved file holds the digest as printed, and the start
    record keeps the text that was printed, not the digest
    (the code before signed and stored the whole digest twice in it)."""
    project = tmp_path / "project"
    payload = _flood_project(project, 4 << 20)
    (project / "supervise.toml").write_text(
        (project / "supervise.toml").read_text() + "[[stages]]\nname = \"late\"\n"
        "run = [\"echo\", \"LATE-MARK\"]\n")
    h = harnesses()  # type: ignore[operator]
    run = h.run(["hook", "claude"], cwd=project, stdin=payload)
    assert run.returncode == 0, run.stderr
    text = json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"]
    assert len(text) <= 9_000 and "LATE-MARK" in text  # the small stage still fits
    assert "stage 'flood' (4,194,305 characters) is cut" in text
    saved = next((project / ".supervise" / "digests").glob("digest-*.txt"))
    assert saved.stat().st_size == (4 << 20) + 1 + len("LATE-MARK\n")
    records = list((project / ".supervise" / "starts").glob("*.json"))
    assert records and all(r.stat().st_size < 64 << 10 for r in records), \
        [r.stat().st_size for r in records]
    again = h.run(["hook", "claude"], cwd=project, stdin=payload)  # a repeat: nothing printed
    assert again.returncode == 0 and again.stdout == b""
