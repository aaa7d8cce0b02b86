"""The command-line verbs: one module per verb, each exposing ``main(argv) -> int``.

``supervisor._main`` imports only the chosen verb's module (one visible dispatch
table); ``_cli`` holds the argument helpers the verbs share.

May import: every room (a verb orchestrates payload, session, config, engine and
adapters). Outside this room, only the door imports a verb.
"""
