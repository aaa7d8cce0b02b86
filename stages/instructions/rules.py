"""Rules files of Claude Code and Cursor, for every harness that does not load them itself.

* Claude Code (code.claude.com/docs/en/memory, "Organize rules with .claude/rules/"):
  ``.claude/rules/**/*.md``; a rule without ``paths:`` frontmatter is loaded in every session,
  one with ``paths:`` (a glob or a list of globs, project-relative) only when the agent works
  on a matching file.
* Cursor (cursor.com/docs/context/rules): ``.cursor/rules/**/*.mdc`` (and ``.md``) with
  frontmatter ``description``, ``globs`` (a glob, a comma-separated string or a list) and
  ``alwaysApply``: ``alwaysApply: true`` applies in every chat, ``globs`` when a matching file
  is in context, a ``description`` alone lets the agent pull it in ("agent requested"), none
  of them only when named ("manual").

The frontmatter is parsed by PyYAML (``yaml.safe_load``), never by hand; a rule whose
frontmatter does not parse is named with the reason and not applied. A rule's text is read
through :func:`instructions.files.examine`, the one door of every instruction file.

Each rule becomes a :class:`Rule`: ``always`` rules are supplied whole by the digest,
``scoped`` ones are listed with their globs (and injected on the read of a matching file by
the harnesses whose read event we answer: :func:`supervisor.session._rules.matching`, from the
index :func:`write_index` leaves in the state dir), the others are listed with their
description. Which harness loads which convention itself is its loader's business
(``instructions.discover``: ``claude_loads`` has ``.claude/rules``, ``cursor_loads``
``.cursor/rules``).
"""

from __future__ import annotations

import os
from collections.abc import Container
from pathlib import Path

from instructions.files import FileText, Place, examine, real, rules_in
from supervisor._record import record, replace
from supervisor.session._rules import INDEX_DIR, INDEX_VERSION, index_name, split_frontmatter
from supervisor.state._intake import project_scope

CONVENTIONS = {"claude": (".claude/rules", (".md",)), "cursor": (".cursor/rules", (".mdc", ".md"))}
"""Convention -> (rules folder relative to a directory, file suffixes)."""


@record
class Rule:
    """One rules file.

    Attributes:
        path: absolute path as discovered (not resolved).
        convention: ``claude`` or ``cursor``.
        kind: ``always`` (every session), ``scoped`` (files matching ``globs``),
            ``requested`` (a ``description`` only: the agent may read it when relevant),
            ``manual`` (only when named), ``broken`` (unreadable or bad frontmatter:
            ``problem`` says why).
        globs: the project-relative globs of a scoped rule (``paths:`` or ``globs:``).
        description: Cursor's ``description``, ``""`` when none.
        body: the rule's text without its frontmatter (hidden text removed), None unless read.
        problem: why the rule cannot be used, ``""`` when it can.
    """

    path: Path
    convention: str
    kind: str
    globs: tuple[str, ...] = ()
    description: str = ""
    body: FileText | None = None
    problem: str = ""


def is_rule_file(path: Path) -> bool:
    """``path`` (as discovered) is a rules file of a convention of :data:`CONVENTIONS`: below
    its rules folder (``.claude/rules``, ``~/.claude/rules``, ``.cursor/rules``) with one of
    its suffixes. Its frontmatter is metadata: the model is given its body."""
    parts = path.parts
    for folder, suffixes in CONVENTIONS.values():
        first, second = folder.split("/")
        if path.suffix in suffixes and any(
                parts[i] == first and parts[i + 1] == second for i in range(len(parts) - 2)):
            return True
    return False


def rule_files(place: Place) -> list[tuple[str, Path]]:
    """``[(convention, path)]`` of every rules file from the project root down to cwd, each
    folder's files sorted by relative path, Claude's before Cursor's. Anything but a folder
    with a rules suffix is one (a link, a FIFO, a device link): :func:`classify` reads it
    through the door, which names why it is not read. A rules folder that leads out of the
    project is not walked, and a walk is bounded (:func:`instructions.files.rules_in`)."""
    out: list[tuple[str, Path]] = []
    for d in place.dirs_root_to_cwd():
        for convention, (folder, suffixes) in CONVENTIONS.items():
            out += [(convention, p) for p in rules_in(d / folder, suffixes, place.root)]
    return out


def _globs(value: object) -> tuple[str, ...]:
    """A ``paths:``/``globs:`` value as globs: a string (Cursor: comma-separated) or a list."""
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(g.strip() for g in items if isinstance(g, str) and g.strip())


def classify(convention: str, path: Path, root: Path) -> Rule:
    """Read and classify one rules file (see the module docstring); one whose real path
    leaves the project ``root`` is refused unread, as a project instruction file is. Never
    raises."""
    content, why = examine(path, project_scope(root))  # the one door, confined to the project
    if content is None:
        return Rule(path, convention, "broken", problem=why)
    front, body = split_frontmatter(content.text)
    meta: object = {}
    if front is not None:
        import yaml  # PyYAML, only for a rules file with frontmatter

        try:
            meta = yaml.safe_load(front) or {}
        except yaml.YAMLError as err:
            where = getattr(err, "problem_mark", None)
            at = f" at line {where.line + 2}" if where is not None else ""
            return Rule(path, convention, "broken", problem=f"its frontmatter is not valid YAML{at}")
        except (RecursionError, MemoryError):  # PyYAML composes recursively: `[[[[...`
            return Rule(path, convention, "broken",
                        problem="its frontmatter is nested too deeply to parse")
    if not isinstance(meta, dict):
        return Rule(path, convention, "broken", problem="its frontmatter is not a YAML mapping")
    text = replace(content, text=body)
    description = meta.get("description")
    description = " ".join(description.split()) if isinstance(description, str) else ""
    if convention == "claude":
        globs = _globs(meta.get("paths"))
        return Rule(path, convention, "scoped" if globs else "always", globs, description, text)
    if meta.get("alwaysApply") is True:
        return Rule(path, convention, "always", (), description, text)
    globs = _globs(meta.get("globs"))
    if globs:
        return Rule(path, convention, "scoped", globs, description, text)
    return Rule(path, convention, "requested" if description else "manual", (), description, text)


def rules_for(place: Place, loaded: Container[str]) -> list[Rule]:
    """The rules of the project the harness does not load itself (``loaded``: real paths of
    what it loads, from its loader), classified, in :func:`rule_files` order."""
    return [classify(convention, path, place.root) for convention, path in rule_files(place)
            if real(path) not in loaded]


def write_index(state_dir: str, harness: str, place: Place, rules: list[Rule]) -> str | None:
    """Record the path-scoped rules ``harness`` does not load (absolute path, globs,
    convention) in ``<state>/rules/<harness>.json`` for its read hooks, so a read is matched
    without parsing any frontmatter (:mod:`supervisor.session._rules`), signed with the
    per-user key (:mod:`supervisor.state._signing`: the hook follows no index it did not
    sign); the index is removed when there are none, and when there is no key (no home:
    nothing is injected on a read). Returns a problem line, or None."""
    from supervisor._errors import StateError
    from supervisor._jsontext import dumps
    from supervisor.state._signing import seal, user_key
    from supervisor.state._statedir import open_subpath

    scoped = [{"path": str(r.path), "globs": list(r.globs), "convention": r.convention}
              for r in rules if r.kind == "scoped"]
    name = index_name(harness)
    try:
        key = user_key(create=True) if scoped else None
    except OSError:
        key = None  # no home: an index nobody could trust is not written
    try:
        if key is None and not os.path.lexists(os.path.join(state_dir, INDEX_DIR, name)):
            return None  # nothing to record, nothing to remove: no folder made
        folder = open_subpath(state_dir, (INDEX_DIR,), create=True)
        assert folder is not None
        with folder:
            if key is not None:
                doc = seal({"version": INDEX_VERSION, "harness": harness or "terminal",
                            "root": str(place.root), "rules": scoped}, key)
                folder.write(name, dumps(doc).encode("utf-8"))
            else:
                folder.remove(name)
    except (StateError, OSError) as err:
        return f"cannot record the path-scoped rules for the read hooks: {err}"
    return None
