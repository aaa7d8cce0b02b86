"""The ``instructions`` stage's body (its program, ``__main__.py``, only imports and runs it).

A program file is compiled on every run; a module is read from its cached bytecode. The body
lives here so a digest does not recompile it at each session start.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from _common import expand_home, opt_bool, opt_int, opt_strings, stage_options, warn
from instructions.files import ANYWHERE, Place, is_within, present, real
from instructions.discover import LOADERS, globals_for, supply_chain
from instructions.imports import Entry, Skipped, Walk
from instructions.listing import Listing, on_demand
from instructions.rules import Rule, is_rule_file, rules_for, write_index
from supervisor.session._nested import listing_note, scope_of, subtree_file
from supervisor._harnesses import BY_NAME, label
from supervisor._sanitize import one_line, removed_note
from supervisor.state._intake import identity, project_scope

DEFAULT_MAX_BYTES = 32 * 1024
DEFAULT_MAX_DEPTH = 5
MAX_NESTED_LISTED = 20


def native_files(place: Place, harness: str, max_depth: int) -> tuple[list[Path], dict[str, tuple[int, int]]]:
    """``(top-level files the harness loads, {real path: identity} of everything it loads,
    imports included)``; identities are ``(st_dev, st_ino)``, so a hard link of a loaded file
    counts as loaded."""
    row = BY_NAME.get(harness)
    loads = LOADERS.get(row.loads_at(os.environ.get("SUPERVISE_HARNESS_VERSION", ""))) if row else None
    if row is None or loads is None:
        return [], {}
    tops = loads(place)
    loaded: dict[str, tuple[int, int]] = {}
    for p in tops:
        ident = identity(p)
        if ident is not None:
            loaded[real(p)] = ident
    if not row.imports:
        return tops, loaded
    walk = Walk(known=set(), imports=True, max_depth=max_depth, scope=ANYWHERE, home=place.home)
    for p in tops:
        walk.visit(p)
    return tops, {**{e.real: e.content.ident for e in walk.entries}, **loaded}


def extra_files(place: Place, names: tuple[str, ...]) -> list[Path]:
    """The ``files`` option: paths relative to the project root, absolute, or ``~/``."""
    out = []
    for name in names:
        p = Path(expand_home(name))
        p = p if p.is_absolute() else place.root / p
        if present(p):
            out.append(p)  # a FIFO or oversized file is named with its reason by the walk
        else:
            warn(f"option files: {name} is not a file; skipped")
    return out


def nested_listing(place: Place, listing: Listing | None = None) -> tuple[list[str], str]:
    """Instruction files of the directories below cwd that hold a git-tracked or untracked (not
    ignored) file, sorted, each with the reason it cannot be used when there is one. The file
    of a directory is the one the post-tool injection picks (``supervisor.session._nested``:
    ``AGENTS.override.md`` before ``AGENTS.md``; a FIFO or a link to ``/dev/zero`` is named
    with why it is not read, not skipped), so the listing and the injection agree.
    ``listing``: git's listing already started from ``place.cwd`` (the program starts it
    before importing this module); None: started here. Returns ``(lines, problem)``:
    ``problem`` is git's failure in one line with its fix (:attr:`Listing.problem`), ``""``
    when the listing was made or there is nothing to say (outside git)."""
    if listing is None:
        listing = Listing(str(place.cwd))
    raw = listing.output()
    if raw is None:
        return [], listing.problem
    # Plain strings, not Path objects: a 20,000-file listing would make 40,000 Paths (row
    # "embedded default digest, 20,000 tracked files" of docs/benchmarks.md); git's paths are
    # already normal (no "./", no "//"; an untracked nested repository ends in "/" and stands
    # for itself, not for a folder of ours).
    dirs: set[str] = set()
    for rel in raw.decode("utf-8", "surrogateescape").split("\0"):
        parent = rel.rstrip("/").rpartition("/")[0]
        while parent and parent not in dirs:
            dirs.add(parent)  # every folder on the way: a folder may hold only folders
            parent = parent.rpartition("/")[0]
    scope = scope_of(place.root, place.cwd)
    cwd = str(place.cwd)
    out = []
    for d in sorted(dirs, key=lambda d: d.split("/")):  # Path order: by component
        found = subtree_file(os.path.join(cwd, d))
        if found is not None:
            why = listing_note(found, scope)
            out.append(one_line(place.show(found)) + (f": {one_line(why)}" if why else ""))
    return out, ""


def main(listing: Listing | None = None) -> int:
    """Print the stage's section; ``listing``: git's nested listing when the program started
    it already (:func:`instructions.listing.start_early`). Exits 0."""
    options = stage_options()
    harness = os.environ.get("SUPERVISE_HARNESS", "")
    source = os.environ.get("SUPERVISE_SOURCE", "")
    max_bytes = opt_int(options, "max_bytes", DEFAULT_MAX_BYTES)
    max_depth = opt_int(options, "max_import_depth", DEFAULT_MAX_DEPTH)
    supply = opt_strings(options, "supply", ("agents", "claude", "rules"))
    place = Place.from_env()

    tops, known = native_files(place, harness, max_depth)
    scope = project_scope(place.root,
                          allow=tuple(expand_home(p) for p in opt_strings(options, "allow_paths", ())),
                          anywhere=opt_bool(options, "allow_outside", False),
                          hint="; allow it with the allow_outside or allow_paths option")
    row = BY_NAME.get(harness)
    loads_self = row is not None and row.loads_at(os.environ.get("SUPERVISE_HARNESS_VERSION", "")) in LOADERS
    walk = Walk(known=set(known.values()), imports=opt_bool(options, "imports", True),
                max_depth=max_depth, scope=scope, home=place.home,
                follow_known=not (loads_self and row is not None and row.imports))
    if loads_self and row is not None and not row.imports:
        for p in tops:  # the harness loads these but not their imports: we supply those
            walk.visit(p, emit=False)
    for p in globals_for(place) if opt_bool(options, "global", False) else []:
        walk.visit(p, trusted=True)  # the harnesses' documented home files
    for p in supply_chain(place, supply):
        walk.visit(p)  # project files: inside the project, like an @import
    rules = rules_for(place, known) if "rules" in supply else []
    for rule in rules:
        if rule.kind == "always":
            walk.visit(rule.path)  # read again by the walk (imports); shown without frontmatter
    _rule_bodies(walk, rules)
    for p in extra_files(place, opt_strings(options, "files", ())):
        # named by the config itself, which could as well set allow_outside: trusted as much
        # (never /proc, /sys or /dev)
        walk.visit(p, trusted=True)

    nested, unlisted = (nested_listing(place, listing)
                        if opt_bool(options, "list_nested", not on_demand(harness)) else ([], ""))
    text = render(place, harness, source, walk.entries, walk.skipped, max_bytes, nested, unlisted,
                  rules)
    if text:
        sys.stdout.buffer.write(text.encode("utf-8", errors="replace"))
        sys.stdout.flush()
    state = os.environ.get("SUPERVISE_STATE_DIR", "")
    if state and os.environ.get("SUPERVISE_PREVIEW") != "1":
        problem = write_index(state, harness, place, rules)
        if problem:
            warn(problem)
    if opt_bool(options, "refresh", True):
        record_baseline(place, harness, kept_entries(walk.entries, max_bytes), known,
                        {real(p) for p in tops if not is_within(p, place.root)})
    return 0


def _rule_bodies(walk: Walk, rules: list[Rule]) -> None:
    """The walk's entries of always-applied rules carry the rule's text without its
    frontmatter (metadata for the harness, not instructions for the model)."""
    bodies = {real(r.path): r.body for r in rules if r.kind == "always" and r.body is not None}
    for i, entry in enumerate(walk.entries):
        body = bodies.get(entry.real)
        if body is not None:
            walk.entries[i] = Entry(entry.path, entry.real, body, entry.importer)


def record_baseline(place: Place, harness: str, injected: list[Entry],
                    loaded: dict[str, tuple[int, int]], user_files: set[str]) -> None:
    """The session's instruction-file baseline (``supervisor.session._refresh``): what the digest
    injected and what the harness loads itself, so a file edited during the session is
    re-injected once at the next prompt. A file outside the project is marked a user file
    (read anywhere but ``/proc``, ``/sys``, ``/dev`` at refresh) when this stage injected it
    (its door allowed it) or it is one of ``user_files``, the real paths of the harness's own
    home files; any other file stays confined to the project. Needs a session id; a problem
    is one warning."""
    session_id = os.environ.get("SUPERVISE_SESSION_ID", "")
    state = os.environ.get("SUPERVISE_STATE_DIR", "")
    if not session_id or not state:
        return
    project = project_scope(place.root)

    def user(real_path: str) -> bool:  # allowed outside the project: judged by this stage
        return not any(is_within(Path(real_path), Path(root)) for root in project.roots)

    files = [(e.real, place.show(e.path), "digest", user(e.real), is_rule_file(e.path))
             for e in injected]
    files += [(p, place.show(p), "harness", p in user_files, is_rule_file(Path(p)))
              for p in sorted(loaded)]
    from supervisor._errors import SupervisorError
    from supervisor.session._refresh import record_baseline as record

    try:
        record(Path(state), session_id, harness, files, place.root)
    except (SupervisorError, OSError) as err:
        warn(f"cannot record the instruction files for refresh: {err}")


def kept_entries(entries: list[Entry], max_bytes: int) -> list[Entry]:
    """The entries :func:`render` shows whole (in order, within ``max_bytes``)."""
    kept: list[Entry] = []
    used = 0
    for e in entries:
        size = len(e.content.text.encode("utf-8"))
        if used + size > max_bytes:
            break  # whole files only: once one does not fit, the rest are named
        kept.append(e)
        used += size
    return kept


def render(place: Place, harness: str, source: str, entries: list[Entry], skipped: list[Skipped],
           max_bytes: int, nested: list[str], unlisted: str = "",
           rules: list[Rule] | None = None) -> str:
    """The stage output: heading, whole files within ``max_bytes``, then what was left out;
    ``unlisted``: why the nested files could not be listed (git's failure and its fix);
    ``rules``: the project's rules the harness does not load (always-applied ones are among
    ``entries``; path-scoped and agent-requested ones are listed here, broken ones named)."""
    kept = kept_entries(entries, max_bytes)
    left = entries[len(kept):]
    rules = rules or []
    scoped = [r for r in rules if r.kind == "scoped"]
    requested = [r for r in rules if r.kind == "requested"]
    skipped = skipped + [Skipped(place.show(r.path), f"rule not applied: {r.problem}", r.path)
                         for r in rules if r.kind == "broken"]
    if not (kept or left or skipped or nested or unlisted or scoped or requested):
        return ""
    who = label(harness) if harness else ""
    lines = ["## Instructions"]
    if source == "compact":
        lines.append("Re-emitted after compaction: hook-delivered instructions do not survive it."
                     + (f" Files {who} keeps by itself are not repeated." if who else ""))
    if kept:
        scope = f"{who} does not load by itself" if who else "of this project"
        lines.append(f"Instruction files {scope}, root first (nearer files are more specific);"
                     f" project root: {one_line(str(place.root))}")
    for e in kept:
        notes = []
        if e.importer is not None:
            notes.append(f"imported by {one_line(place.show(e.importer))}")
        if e.content.lossy:
            notes.append("not valid UTF-8: decoded with replacement characters")
        lines.append("")
        lines.append(f"### {one_line(place.show(e.path))}" + (f" ({'; '.join(notes)})" if notes else ""))
        if e.content.hidden:
            lines.append(removed_note(e.content.hidden, one_line(place.show(e.path))))
        lines.append(e.content.text.rstrip("\n"))
    if left:
        lines += ["", f"Left out to stay within {max_bytes} bytes (read them directly):"]
        lines += [f"- {one_line(str(e.path))} ({e.content.size} bytes)" for e in left]
    if skipped:
        lines += ["", "Not included:"]
        lines += [f"- {one_line(s.what)}" + (f" in {one_line(place.show(s.path))}" if s.path and s.what.startswith("@") else "")
                  + f": {one_line(s.reason)}" for s in skipped]
    if nested:
        shown = nested[:MAX_NESTED_LISTED]
        lines += ["", "Nested instruction files (read the one covering a subtree before working in it):"]
        lines += [f"- {p}" for p in shown]
        if len(nested) > len(shown):
            lines.append(f"- ... and {len(nested) - len(shown)} more")
    if scoped:
        lines += ["", "Rules for some files only (read the rule before working on a matching "
                  "file; globs relative to the project root):"]
        lines += [f"- {one_line(place.show(r.path))}: {one_line(', '.join(r.globs))}" for r in scoped]
    if requested:
        lines += ["", "Rules to read when they are relevant:"]
        lines += [f"- {one_line(place.show(r.path))}: {one_line(r.description)}" for r in requested]
    if unlisted:
        lines += ["", f"Nested instruction files not listed: {unlisted}"]
    return "\n".join(lines) + "\n"
