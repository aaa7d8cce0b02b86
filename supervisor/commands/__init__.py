"""The command-line verbs: one module per verb, each exposing ``main(argv) -> int``.

``supervisor._main`` imports only the chosen verb's module (one visible dispatch
table). The verbs harnesses and extensions call often (``hook``, ``nudge``, ``digest``,
``run``, ``bridge``) declare their arguments once, in a table read by ``_args`` (the parse
and ``--help``, without argparse); ``_cli`` holds the argparse helpers of the others.

May import: every room (a verb orchestrates payload, session, config, engine and
adapters). Outside this room, only the door imports a verb.
"""
