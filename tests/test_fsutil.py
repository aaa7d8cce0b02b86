"""One reader for the user's small files: the config file and a harness's settings file.

``config._plan.read_config_bytes`` and ``adapters._settings.read_settings`` each carried their
own copy of the same guarded read (``O_NONBLOCK``, ``fstat``, a size cap); adapters may not
import config, so the read now lives in ``state._fsutil.read_small_file`` and both use it.
Invariant: whatever sits at the name (a FIFO, a folder, a 3 GiB sparse file, a link to
``/dev/zero``), the read never blocks and raises ConfigError with one line naming the file and
the reason; a missing settings file is None, a missing config file an error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor._errors import ConfigError
from supervisor.adapters._settings import read_settings
from supervisor.config._plan import read_config_bytes
from supervisor.state._fsutil import read_small_file


def _sparse(path: Path) -> None:
    with path.open("wb") as f:
        f.truncate(3 << 30)


PLANTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (os.mkfifo, "not a regular file (a folder, FIFO, socket or device); not read"),
    "folder": (os.mkdir, "not a regular file (a folder, FIFO, socket or device); not read"),
    "dev-zero": (lambda p: p.symlink_to("/dev/zero"), "not a regular file"),
    "huge": (_sparse, "too large (3221225472 bytes; "),
}


@pytest.mark.parametrize("kind", sorted(PLANTS))
@pytest.mark.parametrize("reader", ["settings", "config"])
def test_a_planted_name_is_one_line_never_a_block(tmp_path: Path, kind: str, reader: str) -> None:
    plant, why = PLANTS[kind]
    path = tmp_path / "file.json"
    plant(path)
    with pytest.raises(ConfigError) as raised:
        if reader == "settings":
            read_settings(path)
        else:
            read_config_bytes(path)
    assert str(raised.value).startswith(f"{path}: {why}")
    assert "\n" not in str(raised.value)


def test_the_size_cap_names_the_kind_of_file(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(b"{}" + b" " * 100)
    with pytest.raises(ConfigError, match=r"a settings file is at most 50 bytes"):
        read_small_file(path, 50, what="a settings file")
    assert read_small_file(path, 102) == b"{}" + b" " * 100


def test_missing_is_none_only_when_allowed(tmp_path: Path) -> None:
    missing = tmp_path / "absent.json"
    assert read_settings(missing) is None
    assert read_small_file(missing, 10, missing_ok=True) is None
    with pytest.raises(ConfigError, match="cannot read: No such file or directory"):
        read_config_bytes(missing)


def test_settings_read_past_one_read_call(tmp_path: Path) -> None:
    """A settings file larger than one 64 KiB read is read whole (the old copy read once)."""
    path = tmp_path / "settings.json"
    path.write_text('{"pad": "' + "x" * 300_000 + '", "hooks": {}}')
    data = read_settings(path)
    assert data is not None and data["hooks"] == {} and len(data["pad"]) == 300_000


def test_a_pipe_the_user_named_is_read_for_config(tmp_path: Path) -> None:
    """``--config <(...)``: a pipe is read when special_ok says the user named it."""
    read_end, write_end = os.pipe()
    os.write(write_end, b"budget = 5\n")
    os.close(write_end)
    try:
        assert read_config_bytes(Path(f"/dev/fd/{read_end}"), special_ok=True) == b"budget = 5\n"
    finally:
        os.close(read_end)


def test_point_at_devnull_takes_the_descriptor_off_its_reader() -> None:
    """The one "point fd at /dev/null" (sink, stdout outlet, hook envelope, EPIPE exit): the
    descriptor stays open and writable, and nothing more reaches what it pointed at."""
    from supervisor.state._fsutil import point_at_devnull

    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"half")
        point_at_devnull(write_end)
        assert os.write(write_end, b" a document") == len(b" a document")
        assert os.read(read_end, 100) == b"half"
        assert os.read(read_end, 100) == b""  # the pipe has no writer left: end of file
    finally:
        os.close(read_end)
        os.close(write_end)
    point_at_devnull(10_000)  # never raises, even for a number nothing can take


def test_one_line_for_an_os_error() -> None:
    """One describer for lost output (terminal verbs, the hook's envelope, the digest)."""
    import errno

    from supervisor._errors import describe_os_error
    from supervisor.state._delivery import WriteFailed, write_whole

    assert describe_os_error(OSError(errno.ENOSPC, "No space left on device")) == \
        "No space left on device (ENOSPC)"
    assert describe_os_error(BrokenPipeError(errno.EPIPE, "Broken pipe")) == \
        "the reader closed the pipe (EPIPE)"
    assert describe_os_error(OSError("odd")) == "odd"
    with open("/dev/full", "wb", buffering=0) as full:
        with pytest.raises(WriteFailed, match=r"^No space left on device \(ENOSPC\) after 0 "
                                              r"of 3 bytes$"):
            write_whole(full.fileno(), b"abc")


def test_short_is_one_line_cut_saying_how_long() -> None:
    """One shortener for untrusted arguments in messages (verbs, hook, nudge)."""
    from supervisor._sanitize import short
    from supervisor.commands.hook import parse_hook_args

    assert short("a\nb\x1b[2J") == "a\\nb\\x1b[2J"
    cut = short("x" * 1000, 100)
    assert cut == "x" * 60 + "... (1000 characters)"
    problems = parse_hook_args(["claude", "--bogus=" + "y\x1b" * 500]).problems
    assert problems and all(len(p) < 200 and "\x1b" not in p for p in problems)
