"""Built-in stage ``memory``: the recap of a ``.remember/``-style memory store.

Options (``[stages.options]``, all optional; see docs/stages/memory.md):

    dir = ".remember"          store dir, relative to the project (``~`` allowed)
    handoff = "remember.md"    the handoff note's file name in the store
    max_bytes = 9000           byte budget of this stage's whole output
    file_max_bytes = 200000    per-file cap: bigger files are kept on disk, not read
    max_redeliveries = 3       unchanged handoff bodies shown at most this often (0 = no cap)
    slices_shown = 10          rotated slices listed by name
    consolidate = [...]        command run detached when past-day staging is pending
    consolidate_timeout = 600  seconds before that command is killed
    exposure = true            record injected bytes in <state>/exposure.jsonl

At ``SUPERVISE_SOURCE=compact`` identity.md is injected in full and every other memory file is
named with its path and byte size; every other source, unrecognized or empty included, gets
the full recap (claude-remember #339/#340). Silent when the store does not exist.
"""

from __future__ import annotations

if __name__ == "__main__":  # the common case, decided before any other import (digest start)
    import os as _os
    import sys as _sys

    _sys.path.insert(0, _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))  # stages/
    from _idle import idle as _idle  # the rule the engine checks too (stages/_idle.py)

    if _idle("memory", _os.environ):
        raise SystemExit(0)  # default options and no store: main() would print nothing

import os  # noqa: E402
import sys  # noqa: E402

if __name__ != "__main__":  # run as the program, the check above put stages/ first already
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # stages/

from memory import common  # noqa: E402

if __name__ == "__main__":
    from memory.recap import main  # the body, from cached bytecode

    common.run_stage_main(main, "memory")
