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


def test_the_document_written_from_chunks_is_the_document() -> None:
    stages = (StageResult("a", "ok", 0, 0.12345, 9, False, 'x"\n\u00e9\x01'),
              StageResult("b", "skipped"), StageResult("c", "killed", -9, 1.5, 0, True, "cut"))
    result = DigestResult(stages, True, 10.0, 2.5, "budget")
    parts: list[bytes] = []
    result.write_json(parts.append, {"a": [b'x"\n', "\u00e9\x01".encode()]},
                      {"config_error": "bad ü"})
    doc = json.loads(b"".join(parts))
    assert list(doc) == ["config_error", "truncated", "reason", "budget", "seconds", "stages"]
    assert doc["stages"][0]["output"] == 'x"\n\u00e9\x01'
    assert json.loads(result.to_json()) == {k: v for k, v in doc.items() if k != "config_error"}
    assert result.to_json() == json.dumps({
        "truncated": True, "reason": "budget", "budget": 10.0, "seconds": 2.5,
        "stages": [{"name": s.name, "status": s.status, "exit_code": s.exit_code,
                    "seconds": round(s.seconds, 3), "bytes": s.bytes, "truncated": s.truncated,
                    "output": s.output} for s in stages]}, ensure_ascii=False)


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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS from /proc")
def test_json_of_a_large_stage_holds_its_output_once(tmp_path: Path) -> None:
    """64 MiB through `--format json` under a raised cap: the CLI's peak resident set stays
    near the output kept (the old code built the document whole, then encoded it: about 8x)."""
    mib = 64
    (tmp_path / "supervise.toml").write_text(
        f"budget = 120\nmax_output = {4 * mib << 20}\n[[stages]]\nname = \"flood\"\n"
        f"run = \"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {mib << 20}\"\n"
        f"shell = true\nmax_output = {4 * mib << 20}\n")
    out = tmp_path / "doc.json"
    env = {**os.environ, "SUPERVISE_STATE_DIR": str(tmp_path / "state")}
    with open(out, "wb") as f:
        proc = subprocess.Popen(supervise_cmd("digest", "--format", "json"), cwd=tmp_path,
                                stdout=f, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                env=env)
        peak = peak_rss_until_exit(proc)
        assert proc.wait(timeout=120) == 0
    doc = json.loads(out.read_bytes())
    # the output is what the stage printed, and the line break every stage ends on
    assert doc["stages"][0]["bytes"] == mib << 20 and len(doc["stages"][0]["output"]) == (mib << 20) + 1
    assert 0 < peak < (1.5 * mib + 48) * (1 << 20), f"peak RSS {peak >> 20} MiB"
