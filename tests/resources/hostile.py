"""Hostile stage programs for the engine tests. Usage: python hostile.py KIND [ARGS].

Every process writes its pid to $PIDDIR/<role>.pid (when PIDDIR is set) and prints `ready`
lines so tests synchronise by handshake, never by sleeping.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def note(role: str) -> None:
    piddir = os.environ.get("PIDDIR")
    if piddir:
        tmp = os.path.join(piddir, f".{role}.tmp")
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.replace(tmp, os.path.join(piddir, f"{role}.pid"))


def ignore_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def forever() -> None:
    while True:
        time.sleep(60)


def main() -> None:
    kind = sys.argv[1]
    if kind == "term-ignoring-child":  # a child in the group that ignores TERM; leader dies on TERM
        if os.fork() == 0:
            ignore_term(); note("child"); forever()
        note("leader"); print("leader ready", flush=True); forever()
    elif kind == "setsid-escapee":  # grandchild calls setsid, ignores TERM, holds stdout
        if os.fork() == 0:
            os.setsid(); ignore_term(); note("escapee"); forever()
        note("leader"); print("leader ready", flush=True); forever()
    elif kind == "double-fork":  # daemon: intermediate exits, grandchild setsid + ignores TERM
        pid = os.fork()
        if pid == 0:
            if os.fork() == 0:
                os.setsid(); ignore_term(); note("daemon"); forever()
            os._exit(0)
        os.waitpid(pid, 0)
        note("leader"); print("leader ready", flush=True); forever()
    elif kind == "env-clearing-daemon":  # double fork, setsid, TERM ignored, empty environment
        pid = os.fork()
        if pid == 0:
            if os.fork() == 0:
                os.setsid(); ignore_term(); note("daemon")
                os.execve("/bin/sleep", ["sleep", "60"], {})  # SIG_IGN survives exec
            os._exit(0)
        os.waitpid(pid, 0)
        note("leader"); print("leader ready", flush=True); forever()
    elif kind == "fork-chain":  # each generation forks, the child setsids, the parent exits
        ignore_term()
        end = time.monotonic() + 20
        r, w = os.pipe()  # handshake: the leader exits only once the chain has started
        if os.fork() != 0:
            os.read(r, 1); os._exit(0)
        os.setsid(); note("chain"); os.write(w, b"k")
        while time.monotonic() < end:
            if os.fork() != 0:
                os._exit(0)
            os.setsid()
            note("chain")
            time.sleep(0.01)
        os._exit(0)
    elif kind == "hold-pipe":  # leader exits at once; a setsid grandchild holds stdout 60 s
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid(); note("holder"); os.write(w, b"k"); time.sleep(60); os._exit(0)
        os.read(r, 1)  # handshake: the holder is set up before the leader exits
        note("leader"); print("leader done", flush=True); os._exit(0)
    elif kind == "stdin-reader":
        data = sys.stdin.read()
        print(f"read {len(data)} bytes from stdin", flush=True)
    elif kind == "big-line":  # N bytes without newline
        n = int(sys.argv[2])
        out = sys.stdout.buffer
        chunk = b"x" * 65536
        while n > 0:
            out.write(chunk[:n]); n -= len(chunk)
        out.flush()
    elif kind == "coffee":
        sys.stdout.write("\u2615" * 100000); sys.stdout.flush()
    elif kind == "buffered-then-hang":  # block-buffered writer (stdout is a pipe) then hangs
        print("first line before the hang")
        print("second line")
        note("leader"); forever()
    elif kind == "split-utf8":
        sys.stdout.buffer.write(b"abc\xe2\x86"); sys.stdout.flush(); note("leader"); forever()
    elif kind == "ignore-term":
        ignore_term(); note("leader"); print("ignoring TERM", flush=True); forever()
    elif kind == "flood":  # N MiB as fast as possible
        n = int(sys.argv[2])
        chunk = (b"y" * 1023 + b"\n") * 1024
        out = sys.stdout.buffer
        for _ in range(n):
            out.write(chunk)
        out.flush()
    elif kind == "echo":
        print(" ".join(sys.argv[2:]), flush=True)
    elif kind == "sleep-echo":
        time.sleep(float(sys.argv[2])); print(" ".join(sys.argv[3:]), flush=True)
    elif kind == "env":
        for name in sys.argv[2:]:
            print(f"{name}={os.environ.get(name, '<unset>')}", flush=True)
    else:
        raise SystemExit(f"unknown kind {kind}")


if __name__ == "__main__":
    main()
