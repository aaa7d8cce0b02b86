"""Exposure metrics (brief memory.md #12; seed 002: resident exposure is never counted as use)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.state import _exposure
from supervisor.config._builtins import builtin_argv
from supervisor.state._exposure import append_exposure, estimate_tokens, summarize_exposure

ROOT = Path(__file__).resolve().parent.parent


def test_estimate_tokens_is_ceil_bytes_over_four() -> None:
    assert [estimate_tokens(n) for n in (0, 1, 4, 5, 8, 9, 9000)] == [0, 1, 1, 2, 2, 3, 2250]


def test_append_then_summarize_per_file_and_per_source(tmp_path: Path) -> None:
    state = tmp_path / "state"
    append_exposure(state, what="/p/.remember/identity.md", nbytes=100, source="startup", session="a", stage="memory")
    append_exposure(state, what="/p/.remember/identity.md", nbytes=100, source="compact", session="a", stage="memory")
    append_exposure(state, what="/p/.remember/now.md", nbytes=9, source="startup", session="b", stage="memory")
    append_exposure(state, what="/p/memory/summary.md", nbytes=4000, source="", session="", stage="summary")
    summary = summarize_exposure(state)
    assert summary.events == 4 and summary.skipped == 0
    files = {f.what: (f.count, f.bytes, f.tokens) for f in summary.files}
    assert files == {"/p/.remember/identity.md": (2, 200, 50), "/p/.remember/now.md": (1, 9, 3),
                     "/p/memory/summary.md": (1, 4000, 1000)}
    assert summary.files[0].what == "/p/.remember/identity.md"  # most exposed first
    sources = {s.source: (s.events, s.tokens, s.sessions) for s in summary.sources}
    assert sources == {"startup": (2, 28, 2), "compact": (1, 25, 1), "(none)": (1, 1000, 1)}
    data = summary.to_dict()
    assert json.loads(json.dumps(data))["events"] == 4
    text = "\n".join(summary.lines())
    assert "exposure: 4 injections, ~1,053 tokens" in text
    assert "source compact: 1 injections in 1 sessions, ~25 tokens" in text
    assert "/p/.remember/identity.md: 2x, ~50 tokens" in text


def test_event_shape(tmp_path: Path) -> None:
    append_exposure(tmp_path, what="/x/é.md", nbytes=7, source="startup", session="s1", stage="memory")
    event = json.loads((tmp_path / "exposure.jsonl").read_text(encoding="utf-8"))
    assert set(event) == {"v", "at", "event", "stage", "what", "bytes", "tokens", "source", "session"}
    assert event["what"] == "/x/é.md" and event["tokens"] == 2 and event["event"] == "exposure"


def test_missing_log_is_an_empty_summary(tmp_path: Path) -> None:
    summary = summarize_exposure(tmp_path / "nowhere")
    assert summary.events == 0 and summary.lines() == ["exposure: none recorded"]


def test_malformed_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    append_exposure(tmp_path, what="/a", nbytes=4, source="startup", session="s", stage="memory")
    with (tmp_path / "exposure.jsonl").open("ab") as f:
        f.write(b"not json\n\xff\xfe\n[1,2]\n")
        f.write(b'{"event": "use", "what": "/a", "bytes": 4}\n')  # an explicit read is not exposure
        f.write(b'{"event": "exposure", "what": "/a", "bytes": true}\n')
        f.write(b'{"event": "exposure", "what": "/a", "bytes": 8, "source": 5}\n')
    summary = summarize_exposure(tmp_path)
    assert summary.events == 2 and summary.skipped == 5
    assert {s.source for s in summary.sources} == {"startup", "(none)"}
    assert "(5 malformed log lines skipped)" in summary.lines()[-1]


def test_rotation_keeps_one_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_exposure, "MAX_LOG_BYTES", 300)
    for i in range(10):
        append_exposure(tmp_path, what=f"/f{i}", nbytes=4, source="startup", session="s", stage="memory")
    assert (tmp_path / "exposure.jsonl.1").exists()
    assert (tmp_path / "exposure.jsonl").stat().st_size <= 300 + 250
    summary = summarize_exposure(tmp_path)
    assert 0 < summary.events <= 10 and summary.skipped == 0


def test_concurrent_appends_from_processes_keep_whole_lines(tmp_path: Path) -> None:
    code = ("import sys; from pathlib import Path; from supervisor.state._exposure import append_exposure\n"
            "for i in range(50): append_exposure(Path(sys.argv[1]), what='/f' + sys.argv[2] * 200, nbytes=i,"
            " source='startup', session=sys.argv[2], stage='memory')\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(n)]) for n in range(8)]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    summary = summarize_exposure(tmp_path)
    assert summary.events == 400 and summary.skipped == 0
    assert summary.sources[0].sessions == 8


def test_import_is_stdlib_only_and_cheap() -> None:
    code = ("import sys; import supervisor.state._exposure; "
            "print(sorted(m for m in ('pydantic', 'anyio', 'psutil', 'yaml', 'dataclasses', "
            "'datetime', 'typing') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.strip() == "[]"


def test_summaries_are_frozen_records(tmp_path: Path) -> None:
    """The summary types are ``@record`` classes (no ``dataclasses`` on a stage's path): frozen,
    and their JSON form is unchanged."""
    from supervisor._record import FrozenRecordError

    append_exposure(tmp_path, what="/p/a.md", nbytes=8, source="", session="s", stage="memory")
    summary = summarize_exposure(tmp_path)
    with pytest.raises(FrozenRecordError):
        summary.files[0].count = 5  # type: ignore[misc]
    assert summary.to_dict()["files"] == [{"what": "/p/a.md", "count": 1, "bytes": 8,
                                           "tokens": 2, "last_at": summary.files[0].last_at}]
    assert summary.to_dict()["sources"] == [{"source": "(none)", "events": 1, "bytes": 8,
                                             "tokens": 2, "sessions": 1}]
    assert len(summary.files[0].last_at) == 25 and summary.files[0].last_at.endswith("+00:00")


def run_stage(name: str, project: Path, state: Path, source: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERVISE_")}
    env.update({"SUPERVISE_SOURCE": source, "SUPERVISE_PROJECT_DIR": str(project),
                "SUPERVISE_STATE_DIR": str(state), "SUPERVISE_STAGE_NAME": name,
                "SUPERVISE_SESSION_ID": "sess", "SUPERVISE_STAGE_OPTIONS": "{}"})
    subprocess.run(builtin_argv(name), env=env, cwd=project,
                   stdin=subprocess.DEVNULL, capture_output=True, check=True, timeout=30)


def test_stages_record_startup_versus_compact(git_repo: Path, tmp_path: Path) -> None:
    """What a digest costs per source: compact injects identity only, startup everything."""
    state = tmp_path / "state"
    remember = git_repo / ".remember"
    remember.mkdir()
    (remember / "identity.md").write_text("I" * 400)
    (remember / "now.md").write_text("N" * 4000)
    (git_repo / "memory").mkdir()
    (git_repo / "memory" / "summary.md").write_text("---\nupdated_at: x\n---\n" + "S" * 800)
    for source in ("startup", "compact", "compact"):
        run_stage("memory", git_repo, state, source)
        run_stage("summary", git_repo, state, source)
    summary = summarize_exposure(state)
    files = {f.what: f.count for f in summary.files}
    assert files == {str(remember / "identity.md"): 3, str(remember / "now.md"): 1,
                     str(git_repo / "memory" / "summary.md"): 3}
    sources = {s.source: s.tokens for s in summary.sources}
    assert sources == {"startup": 100 + 1000 + 200, "compact": 2 * (100 + 200)}
