"""The package version, as a constant: ``supervise --version`` must not import anything else
(``importlib.metadata`` alone costs ~25 ms). tests/test_new_user.py checks it against
``pyproject.toml``."""

VERSION = "0.1.0"
