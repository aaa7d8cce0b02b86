"""The package version, as a constant: ``supervise --version`` must not import anything else
(``importlib.metadata`` alone costs more than the interpreter's start). tests/test_new_user.py checks it against
``pyproject.toml``."""

VERSION = "0.1.0"
