"""supervise status [-C DIR] [--format text|json]: the session state of a project.

Shows the lock owner (alive or stale, which harness, since when), the completion record (and
whether it matches the lock), the last digest a hook or a terminal ran (per-stage status,
seconds, bytes, a stage cut by its ``max_output``), the recent digests (when, from where,
source, seconds of the budget, truncated: a slow-start trend shows here), deferred results
waiting to be delivered, each stage's stderr log (its last lines and how many are new since
the last view) and the exposure (memory files put into a model's context). Reads only; never
takes the mutex; the one thing it writes is the logs' "seen" count (this view becomes the
last view).

Exit status: 0; 1 when the state cannot be read (a symlinked state dir or file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .._exitcodes import EXIT_FAILURE, EXIT_OK
from .._sanitize import one_line
from ..session._routing import when
from ._cli import VerbParser, add_directory, add_format


def build_parser() -> argparse.ArgumentParser:
    """The ``status`` argument parser."""
    p = VerbParser(prog="supervise status", description=__doc__.splitlines()[0])
    add_directory(p)
    add_format(p, "the status")
    return p


def _pending(state_dir: Path) -> list[dict[str, Any]]:
    """Finished deferred results not yet delivered, and runners still going."""
    from ..engine._deferred import pending, running

    done = [{"stage": d.get("name", "?"), "status": d.get("status", "?"),
             "seconds": d.get("seconds"), "finished": d.get("finished")} for d in pending(state_dir)]
    going = [{"stage": r.get("name", "?"), "status": "running", "seconds": None,
              "finished": None} for r in running(state_dir)]
    return done + going


def collect(project: Path) -> dict[str, Any]:
    """The status document (the ``--format json`` shape); ``error`` is set when unreadable."""
    from ..config._context import state_dir_for
    from .._errors import StateError
    from ..session._lock import (COMPLETE_FILE, LOCK_FILE, CompletionRecord, LockRecord, judge_lock,
                                 read_record)
    from ..state._records import dump_record
    from ..session._routing import HISTORY_FILE, LAST_DIGEST_FILE, DigestHistory, LastDigest

    from ..session._off import off_reason

    state_dir = Path(state_dir_for(project))
    doc: dict[str, Any] = {"project": str(project), "state_dir": str(state_dir),
                           "off": off_reason(project) or None, "error": None,
                           "lock": None, "completion": None, "last_digest": None, "pending": [],
                           "stderr_logs": [], "exposure": None, "lost": [], "history": []}
    try:
        from ..state._statedir import StateDir

        StateDir.open_existing(state_dir)  # a symlinked state dir: StateError, nothing read
        lock = read_record(state_dir / LOCK_FILE, LockRecord)
        done = read_record(state_dir / COMPLETE_FILE, CompletionRecord)
        last = read_record(state_dir / LAST_DIGEST_FILE, LastDigest)
        history = read_record(state_dir / HISTORY_FILE, DigestHistory)
    except StateError as err:
        doc["error"] = str(err)
        return doc
    if lock is not None:
        judged = judge_lock(lock)  # the hook's own judgement: status never disagrees with it
        doc["lock"] = {**dump_record(lock, exclude=frozenset({"nonce"})),
                       "alive": judged.verdict == "alive", "judgement": judged.verdict,
                       "reason": judged.reason}
    if done is not None:
        doc["completion"] = {**dump_record(done, exclude=frozenset({"nonce"})),
                             "matches_lock": lock is not None and done.nonce == lock.nonce}
    if last is not None:
        doc["last_digest"] = dump_record(last)
    if history is not None:  # newest first
        doc["history"] = [dump_record(e) for e in reversed(history.entries)]
    doc["pending"] = _pending(state_dir)
    from ..engine._deferred import lost_results

    doc["lost"] = lost_results(state_dir)
    from ..engine._stagelog import read_logs

    try:  # the stage stderr logs; this view becomes "the last view" for their counts
        doc["stderr_logs"] = read_logs(state_dir, mark_seen=True)
    except StateError as err:
        doc["stderr_logs"] = []
        doc["error"] = str(err)
    from ..state._exposure import summarize_exposure

    exposure = summarize_exposure(state_dir)
    doc["exposure"] = exposure.to_dict()
    doc["_exposure_lines"] = exposure.lines()  # for render_text; dropped from the JSON
    return doc


def lock_words(verdict: str, reason: str) -> str:
    """What a lock judgement (:func:`supervisor.session._lock.judge_lock`) means for the
    user, in one line (``status`` and ``doctor``)."""
    if verdict == "alive":
        return "alive (another session holds it: a start here runs read-only)"
    if verdict == "unseen":
        return (f"held, its owner cannot be seen from here: {one_line(reason)}; a start here runs "
                "read-only (`supervise hook HARNESS --take-lock` takes it)")
    return ("stale, not a problem: its owner is gone (that session ended); the next start "
            "replaces it")


def render_text(doc: dict[str, Any]) -> str:
    """The human table."""
    o = one_line  # every string from the tree or a state record: one line, hidden text escaped
    lines = [f"project    {o(doc['project'])}", f"state dir  {o(doc['state_dir'])}"]
    if doc.get("off"):
        lines.append(f"off        watchkeeper is off: {o(doc['off'])}")
    if doc["error"]:
        return "\n".join([*lines, f"error      {o(doc['error'])}"]) + "\n"
    lock = doc["lock"]
    if lock is None:
        lines.append("lock       free")
    else:
        state = lock_words(lock["judgement"], lock["reason"])
        sid = f", session {o(lock['session_id'])}" if lock["session_id"] else ""
        lines.append(f"lock       {o(lock['harness'])} pid {lock['pid']}{sid}, since "
                     f"{when(lock['acquired_at'])}: {state}")
    done = doc["completion"]
    if done is None:
        lines.append("completion none (a clear or compact runs the full digest)")
    else:
        match = "matches the lock" if done["matches_lock"] else "does NOT match the lock (ignored)"
        lines.append(f"completion {when(done['completed_at'])}, {match}")
    last = doc["last_digest"]
    if last is None:
        lines.append("last       no digest recorded (a hook or `supervise digest --session-start` records one)")
    else:
        state = "truncated" if last["truncated"] else ("complete" if last["complete"] else "incomplete")
        lines.append(f"last       {o(last['mode'])} digest from {o(last['harness']) or 'a terminal'}, "
                     f"source {o(last['source']) or '-'}, {last['seconds']:.2f}s, {state}, "
                     f"{when(last['finished_at'])}")
        for stage in last["stages"]:
            cut = "  CUT by max_output" if stage.get("truncated") else ""
            lines.append(f"  {o(stage['name']):<24} {o(stage['status']):<11} {stage['seconds']:7.2f}s "
                         f"{stage['bytes']:>9} bytes{cut}")
    history = doc.get("history") or []
    if history:
        lines.append(f"recent     {len(history)} digest(s), newest first:")
        for item in history:
            lines.append(f"  {when(item['finished_at'])}  {o(item['harness']) or 'terminal':<9} "
                         f"source {o(item['source']) or '-':<8} {item['seconds']:7.2f}s of "
                         f"{item['budget']:g}s  {'TRUNCATED' if item['truncated'] else 'complete'}")
    pending = doc["pending"]
    lines.append(f"pending    {len(pending)} deferred result(s) awaiting delivery")
    for item in pending:
        lines.append(f"  {o(str(item['stage'])):<24} {o(str(item['status'])):<11} finished "
                     f"{when(item['finished'])}")
    for text in doc.get("lost", []):
        lines.append(f"lost       {o(text)}")
    logs = doc.get("stderr_logs") or []
    if logs:
        lines.append(f"stderr     {len(logs)} stage log(s) (stderr kept out of the context)")
    for log in logs:
        new = f"{log['new']} new line(s) since the last view" if log["new"] else "nothing new"
        lines.append(f"  {o(log['stage']):<24} {new}, {log['lines']} in all: {o(log['path'])}")
        lines += [f"    | {o(line)}" for line in log["tail"]]
    exposure = doc.get("_exposure_lines", [])
    if exposure == ["exposure: none recorded"]:
        exposure = ["exposure   none recorded: no memory file (summary, identity, handoff, ...) "
                    "has been put into a model's context here yet; the memory and summary "
                    "stages log each one they inject to exposure.jsonl, and this totals them"]
    lines += exposure
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """Print the status; 0, or 1 when the state cannot be read."""
    args = build_parser().parse_args(argv)
    from ..state._project import find_project_root

    doc = collect(Path(find_project_root(args.directory or Path.cwd())))
    if args.format == "json":
        doc.pop("_exposure_lines", None)
        sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")
    else:
        from .._sanitize import clean

        # state records are project input: a planted result's title or a hand-edited record
        # never sends an escape sequence to the terminal (issue 11 item 8)
        sys.stdout.write(clean(render_text(doc))[0])
    return EXIT_FAILURE if doc["error"] else EXIT_OK
