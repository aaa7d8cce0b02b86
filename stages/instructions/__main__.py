"""Built-in stage ``instructions``: the instruction files the current harness does not load.

Reads ``SUPERVISE_HARNESS`` (empty = a terminal: everything), ``SUPERVISE_SOURCE``,
``SUPERVISE_PROJECT_DIR`` and ``SUPERVISE_STAGE_OPTIONS``; prints ``## Instructions`` then each
file whole, or nothing at all when there is nothing to supply. Always exits 0.
See ``docs/stages/instructions.md`` for the conventions, the options and the caps.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # stages/: helpers import as packages

if __name__ == "__main__":
    from _common import warn

    listing = None
    try:
        from instructions.listing import start_early

        # git walks the tree for the nested listing while the body's modules load
        listing = start_early(os.environ)
        from instructions.stage import main  # the body, from cached bytecode

        code = main(listing)
    except Exception as err:  # a stage exits 0 on every internal failure (memory.md req. 20)
        warn(f"internal error: {type(err).__name__}: {err}")
        code = 0
    finally:
        if listing is not None:
            listing.close()  # never leave git behind (a failure before the listing was read)
    sys.exit(code)
