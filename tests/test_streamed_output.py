"""Output written from the kept chunks, never built whole (issue 26): `supervise digest
--format json` holds a stage's output once, and writes the document piece by piece."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import peak_rss_until_exit, supervise_cmd

from supervisor.engine._output import StreamSink
from supervisor.engine._results import DigestResult, StageResult, _json_piece


def test_json_pieces_are_what_json_dumps_writes() -> None:
    texts = ['a\\b"c\td\ne', "héllo\x01\r", "".join(map(chr, range(128))), "", "日本\n\u2028"]
    for text in texts:
        assert _json_piece(text.encode()) == json.dumps(text, ensure_ascii=False)[1:-1].encode()


def test_the_document_is_what_json_dumps_writes() -> None:
    """The document's shape: the fields known only at a stage's end follow its ``output``,
    the digest's own fields follow its ``stages`` (what lets it be written as it runs)."""
    stages = (StageResult("a", "ok", 0, 0.12345, 9, False, 'x"\n\u00e9\x01'),
              StageResult("b", "skipped"), StageResult("c", "killed", -9, 1.5, 0, True, "cut"))
    result = DigestResult(stages, True, 10.0, 2.5, "budget")
    parts: list[bytes] = []
    result.write_json(parts.append, {"config_error": "bad \u00fc"})
    doc = json.loads(b"".join(parts))
    assert list(doc) == ["config_error", "stages", "truncated", "reason", "budget", "seconds"]
    assert doc["stages"][0]["output"] == 'x"\n\u00e9\x01'
    assert json.loads(result.to_json()) == {k: v for k, v in doc.items() if k != "config_error"}
    assert result.to_json() == json.dumps({
        "stages": [{"name": s.name, "output": s.output, "status": s.status,
                    "exit_code": s.exit_code, "seconds": round(s.seconds, 3), "bytes": s.bytes,
                    "truncated": s.truncated} for s in stages],
        "truncated": True, "reason": "budget", "budget": 10.0, "seconds": 2.5},
        ensure_ascii=False)


def test_a_reader_that_takes_nothing_is_given_up(tmp_path: Path) -> None:
    """A document written after the digest to a reader that stopped reading stays bounded
    (at most HIGH_WATER pending) and is reported as not delivered whole."""
    read_end, write_end = os.pipe()
    try:
        sink = StreamSink(write_end)
        for _ in range(12):
            sink.write_waiting(b"x" * (1 << 20), stall=0.2)
            assert sink.pending <= StreamSink.HIGH_WATER + (1 << 20)
        assert not sink.close(timeout=0.1)
    finally:
        os.close(read_end)
        os.close(write_end)


def _max_rss(argv: list[str], cwd: Path, out: Path, env: dict[str, str]) -> int:
    """Run ``argv`` with stdout to ``out``; its peak resident set in bytes, the kernel's own
    figure for the finished child (``ru_maxrss``, what ``/usr/bin/time -v`` reports)."""
    with open(out, "wb") as f:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=f, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, env=env)
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            proc.returncode = 0  # reaped above: Popen must not wait for it again
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_maxrss * 1024  # KiB on Linux


def _flood(folder: Path, nbytes: int) -> None:
    folder.mkdir()
    (folder / "supervise.toml").write_text(
        f"budget = 120\nmax_output = {4 * nbytes}\n[[stages]]\nname = \"flood\"\n"
        f"run = \"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {nbytes}\"\n"
        f"shell = true\nmax_output = {4 * nbytes}\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB")
def test_json_of_a_large_stage_is_streamed_not_held(tmp_path: Path) -> None:
    """64 MiB through `--format json` under a raised cap: the CLI's peak resident set grows by
    far less than the output over the same digest of a 1 MiB stage (the document is
    written as the stage prints; the code before held the output whole: about 64 MiB
    more)."""
    mib = 64
    env = {**os.environ, "SUPERVISE_STATE_DIR": str(tmp_path / "state")}
    _flood(tmp_path / "big", mib << 20)
    _flood(tmp_path / "small", 1 << 20)
    argv = supervise_cmd("digest", "--format", "json")
    small = _max_rss(argv, tmp_path / "small", tmp_path / "small.json", env)
    big = _max_rss(argv, tmp_path / "big", tmp_path / "big.json", env)
    doc = json.loads((tmp_path / "big.json").read_bytes())
    # the output is what the stage printed, and the line break every stage ends on
    assert doc["stages"][0]["bytes"] == mib << 20 and len(doc["stages"][0]["output"]) == (mib << 20) + 1
    assert big - small < (mib << 20) // 4, f"peak RSS {big >> 20} MiB vs {small >> 20} MiB"


def test_json_reaches_the_reader_while_the_stage_runs(tmp_path: Path) -> None:
    """`--format json` writes a stage's output as it comes: the reader has the stage's first
    line while the stage still waits for a file only the reader creates (the code before
    wrote the document at the digest's end, after the stage)."""
    import select

    gate = tmp_path / "gate"
    (tmp_path / "supervise.toml").write_text(
        "budget = 50\n[[stages]]\nname = \"skipped\"\nrun = \"true\"\n"
        "when = { source = [\"clear\"] }\n[[stages]]\nname = \"slow\"\nshell = true\n"
        f"run = \"echo first; while [ ! -e '{gate}' ]; do sleep 0.05; done; echo second\"\n"
        "[[stages]]\nname = \"after\"\nrun = [\"echo\", \"third\"]\n")
    env = {**os.environ, "SUPERVISE_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen(supervise_cmd("digest", "--format", "json"), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    seen = b""
    want = b'{"name": "slow", "output": "first\\n'
    try:
        import time

        end = time.monotonic() + 40
        while want not in seen and time.monotonic() < end:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                seen += chunk
        streamed = want in seen
    finally:
        gate.touch()
        rest, _ = proc.communicate(timeout=50)
    assert streamed, f"nothing of the stage before it ended: {seen[:200]!r}"
    doc = json.loads(seen + rest)
    assert [(s["name"], s["status"], s["output"]) for s in doc["stages"]] == [
        ("skipped", "skipped", ""), ("slow", "ok", "first\nsecond\n"), ("after", "ok", "third\n")]
    assert doc["truncated"] is False


def test_the_digest_seconds_count_from_its_first_stage(tmp_path: Path) -> None:
    """The document's `seconds` is the whole digest's wall time, from when its first stages
    were started before the engine loaded: never less than a stage's own `seconds` (the code
    before counted from the engine's start and reported less than the stages took)."""
    (tmp_path / "supervise.toml").write_text(
        "budget = 30\n[[stages]]\nname = \"a\"\nrun = [\"sleep\", \"0.3\"]\n"
        "[[stages]]\nname = \"b\"\nrun = [\"true\"]\n")
    env = {**os.environ, "SUPERVISE_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run(supervise_cmd("digest", "--format", "json"), cwd=tmp_path, env=env,
                          capture_output=True, timeout=50, check=True)
    doc = json.loads(proc.stdout)
    assert doc["seconds"] >= max(s["seconds"] for s in doc["stages"]) >= 0.3, doc
