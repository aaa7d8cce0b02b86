"""A git smart-HTTP server on 127.0.0.1 for the e2e tests: ``git http-backend`` behind a tiny
WSGI server, so a harness CLI can clone a local repository as it clones a public one
(``git clone --depth 1 http://127.0.0.1:PORT/NAME.git``; dumb HTTP refuses ``--depth``).

Usage: ``python git_http_server.py ROOT`` serves the repositories under ROOT and prints
``git http server on http://127.0.0.1:PORT/`` once it listens; it runs until killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server


def app(root: str) -> Callable[..., Iterable[bytes]]:
    """The WSGI application running ``git http-backend`` (CGI) for each request."""

    def serve(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": root,
               "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": environ["REQUEST_METHOD"],
               "PATH_INFO": environ.get("PATH_INFO", ""),
               "QUERY_STRING": environ.get("QUERY_STRING", ""),
               "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1"}
        if environ.get("HTTP_GIT_PROTOCOL"):
            env["GIT_PROTOCOL"] = environ["HTTP_GIT_PROTOCOL"]
        done = subprocess.run(["git", "http-backend"], input=body, env=env,
                              capture_output=True, timeout=120)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = done.stdout.partition(b"\n\n")
        status, headers = "200 OK", []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name.strip(), value.strip()))
        start(status, headers)
        return [payload]

    return serve


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


def main() -> None:
    server = make_server("127.0.0.1", 0, app(os.path.abspath(sys.argv[1])),
                         handler_class=_Quiet)
    print(f"git http server on http://127.0.0.1:{server.server_port}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
