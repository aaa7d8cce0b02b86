"""Built-in stage ``repo``: the repository's state in a few lines.

Branch, upstream, ahead/behind, stash count and a capped short status come from ONE
``git status --porcelain=v2 --branch --show-stash -z`` call; the last commits from one
``git log``; the git dirs from one ``git rev-parse`` (all three started at once). In-progress
operations and linked worktrees are read from files in the git dir, with no more processes.
Silent outside git. ``GIT_DIR``-style variables are stripped and ``GIT_OPTIONAL_LOCKS=0`` is set,
so the stage never takes ``index.lock`` while the user works. Always exits 0.
See ``docs/stages/repo.md`` for the options.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # stages/

if __name__ == "__main__":
    from _common import warn

    calls = None
    try:
        from _idle import default_options
        from repo.calls import DEFAULT_COMMITS, DEFAULT_TIMEOUT, DEFAULT_UNTRACKED, Calls

        if default_options(os.environ):  # git works while the body's modules load
            cwd = os.getcwd()
            try:
                calls = Calls(DEFAULT_UNTRACKED, DEFAULT_COMMITS, DEFAULT_TIMEOUT, cwd)
            except OSError:
                sys.exit(0)  # no git: nothing to say
        from repo.status import main  # the body, from cached bytecode

        code = main(calls)
    except Exception as err:  # a stage exits 0 on every internal failure
        warn(f"internal error: {type(err).__name__}: {err}")
        code = 0
    finally:
        if calls is not None:
            calls.close()  # never leave git behind (a failure before its answers were read)
    sys.exit(code)
