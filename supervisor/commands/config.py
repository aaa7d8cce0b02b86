"""supervise config [--default] [--config FILE] [-C DIR]: print the embedded default digest
(TOML, ready to copy into supervise.toml) or the effective configuration as one JSON document
(after SUPERVISE_TIMEOUT / SUPERVISE_GRACE, every key with its value, and "source": where it
was read from)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._exitcodes import EXIT_FAILURE, EXIT_OK
from ._cli import VerbParser, add_directory


def main(argv: list[str]) -> int:
    """Print the config; exit 1 with one line when it is invalid."""
    p = VerbParser(prog="supervise config", description=__doc__)
    p.add_argument("--default", action="store_true", help="print the embedded default TOML")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="read this file instead of the project's supervise.toml or pyproject.toml")
    add_directory(p)
    args = p.parse_args(argv)
    from ..config._schema import default_config_text, load_config
    from .._errors import ConfigError
    from ..state._project import find_project_root

    if args.default:
        sys.stdout.write(default_config_text())
        return EXIT_OK
    from ..session._off import off_line, off_reason

    project = Path(find_project_root(args.directory or Path.cwd()))
    off = off_reason(project)
    if off:  # stdout stays the JSON document; the state is said once, on stderr
        sys.stderr.write("supervise config: " + off_line(off, "this configuration is not used "
                                                          "until it is turned on"))
    try:
        config = load_config(project, args.config)
    except ConfigError as err:
        print(f"supervise: {err}", file=sys.stderr)
        return EXIT_FAILURE
    print(json.dumps({"source": config.source, "stages_from": config.stages_from,
                      **config.model_dump(mode="json")}, indent=2))
    return EXIT_OK
