"""What a failed git call means, in one line with its fix, and the fixes shared by the stages
and ``doctor`` (one home: the digest and ``doctor`` give the same fix for the same fault).

A checkout owned by another uid (a devcontainer, ``docker -v``, WSL drvfs, a sudo'd clone)
makes every git command fail with "detected dubious ownership in repository at '<path>'"
(git 2.35.2+, CVE-2022-24765): the stages used to read that as "not a repository" and said
nothing, so the repository section and the nested-instructions listing vanished. Stdlib
only, no import at module level: stage programs import it before their bodies.
"""

from __future__ import annotations

_DUBIOUS = "detected dubious ownership in repository at '"
_NOT_A_REPO = "not a git repository"


def _printable(text: str) -> str:
    """``text`` on one line: control characters (a newline in a folder name) become ``?``."""
    return "".join(c if c.isprintable() else "?" for c in text)


def failure(what: str, returncode: int | None, stderr: bytes | str) -> str | None:
    """One line saying why ``what`` (``"git status"``) failed, with the fix; None when there is
    nothing to say: success (``returncode`` 0) or "not a git repository" (outside git the
    stages are rightly silent). ``returncode`` None means git was killed at its deadline.

    Shapes: ``git refuses this checkout: /p is owned by another user ("detected dubious
    ownership"); fix: git config --global --add safe.directory /p``, else ``git status
    failed (exit 128): <git's first line>``. At most about 300 characters. Never raises.
    """
    found = explain(what, returncode, stderr)
    if found is None:
        return None
    problem, fix = found
    return f"{problem}; fix: {fix}" if fix else problem


def explain(what: str, returncode: int | None, stderr: bytes | str) -> tuple[str, str] | None:
    """:func:`failure` as ``(problem, fix)``; ``fix`` is ``""`` when none is known."""
    if returncode == 0:
        return None
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    if returncode is None:
        return f"{what} did not finish in time; its answer is missing", ""
    start = text.find(_DUBIOUS)
    if start >= 0:
        rest = text[start + len(_DUBIOUS):]
        path = rest[:rest.find("'")] if "'" in rest else (rest.splitlines() or ["?"])[0]
        import shlex

        shown = _printable(path)
        return (f"git refuses this checkout: {shown} is owned by another user (\"detected "
                f"dubious ownership\")", f"git config --global --add safe.directory "
                f"{shlex.quote(shown)}")
    if _NOT_A_REPO in text:
        return None
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = _printable(first.removeprefix("fatal: "))[:200]
    return f"{what} failed (exit {returncode})" + (f": {first}" if first else ""), ""


def untrack_fix(rel: str) -> str:
    """The fix for project files git tracks that must stay out of it (the memory store
    ``rel``, project-relative POSIX, no trailing slash): untrack them, then ignore them.
    ``git rm`` gets a ``:(literal)`` pathspec when ``rel`` has glob characters."""
    import shlex

    spec = f":(literal){rel}" if any(c in rel for c in "*?[\\") else rel
    return (f"git rm -r --cached -- {shlex.quote(spec)}, then add /{rel}/ to .gitignore or "
            ".git/info/exclude")
