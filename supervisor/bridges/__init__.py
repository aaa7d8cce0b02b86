"""Package data for the extension bridges (Pi, OpenCode): ``core.mjs`` (shared logic) and one
entry file per harness, placed into the harness's extension folder by ``supervise install``
(:mod:`supervisor.bridges._install`). The JSON contract they speak: ``docs/bridge-protocol.md``.
"""
