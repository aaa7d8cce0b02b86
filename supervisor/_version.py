"""The package version, as a constant: ``supervise --version`` must not import anything else
(``importlib.metadata`` alone costs more than the interpreter's start). Its one home:
``pyproject.toml`` reads it (``[tool.hatch.version]``) and the Gemini extension's manifest is
generated from it (:mod:`supervisor._manifests`)."""

VERSION = "0.1.0"
