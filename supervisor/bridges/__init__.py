"""The extension bridges (Pi, OpenCode): the extensions, their placing, their protocol.

Package data: ``core.mjs`` (shared logic) and one entry file per harness, placed into the
harness's extension folder by ``supervise install`` (:mod:`supervisor.bridges._install`).
The Python side of the protocol they speak (one session event in, one JSON document out;
``docs/bridge-protocol.md``) is :mod:`supervisor.bridges._protocol`.

May import: every room but the verbs and the door (base, state, adapters, config, engine,
session).
"""
