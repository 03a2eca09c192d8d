"""``memsif view --serve``: the view served live, so a person can watch memory form during a chat.

A small ``http.server`` on 127.0.0.1 only, serving two things under a random secret path
(``/<token>/``, as Jupyter's token: another user or process of the machine can reach 127.0.0.1 too,
but not guess the path, which is only printed to the one who started the server): the page, made
again whenever the memory file's stamp (:func:`stamp`: identity, size and time of the file and its
``-wal``) differs from the one the last page was made at, and ``stamp``, which the page polls to
reload itself when the file changed. It only reads: the page comes from a callable the caller opens
the file read-only in. Requests naming another host are refused (a web page elsewhere cannot reach
it through a DNS name that points at 127.0.0.1), and so is every method but GET.
"""

from __future__ import annotations

import json
import logging
import hmac
import os
import secrets
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

from ..errors import MemsifError
from .page import policy

__all__ = ["stamp", "serve", "LiveView"]

log = logging.getLogger("memsif_lite")

HOST = "127.0.0.1"


def stamp(path: Path) -> str:
    """What changes whenever the memory file does: the file's and its ``-wal``'s identity, size and
    modification time (a writer in WAL mode appends to the ``-wal``; a checkpoint rewrites the file)."""
    parts = []
    for p in (str(path), f"{path}-wal"):
        try:
            st = os.stat(p)
        except OSError:
            parts.append("-")
            continue
        parts.append(f"{st.st_ino:x}.{st.st_size:x}.{st.st_mtime_ns:x}")
    return "/".join(parts)


class LiveView:
    """The page for the file's current stamp, made again only when the stamp changed."""

    def __init__(self, path: Path, make: Callable[[str], str]):
        self.path, self.make = path, make
        self.lock = threading.Lock()
        self.made: tuple[str, str] | None = None  # (stamp, page)
        self.renders = 0

    def page(self) -> str:
        with self.lock:
            now = stamp(self.path)
            if self.made is None or self.made[0] != now:
                self.made = (now, self.make(now))
                self.renders += 1
            return self.made[1]


def serve(path: Path, make: Callable[[str], str], *, port: int,
          ready: Callable[[str], None] = lambda url: None) -> dict[str, object]:
    """Serve the live view of the memory file at ``path`` until interrupted (Ctrl-C, SIGTERM);
    ``make(stamp)`` returns the page for the file as it is now, marked with ``stamp``. The first
    page is made before listening (an error there is the caller's); ``ready(url)`` is called once
    listening. Returns the URL, the requests answered and the pages made."""
    view = LiveView(path, make)
    view.page()
    counts = {"requests": 0}
    counting = threading.Lock()
    token = secrets.token_urlsafe(24)

    class Handler(BaseHTTPRequestHandler):
        server_version = "memsif-view"
        sys_version = ""

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            with counting:
                counts["requests"] += 1
            where = self.server.server_address[1]  # type: ignore[index]
            if self.headers.get("Host", "") not in {f"{HOST}:{where}", f"localhost:{where}"}:
                self._send(403, "text/plain; charset=utf-8", b"only http://127.0.0.1 may ask for this view\n")
                return
            route = self.path.split("?", 1)[0]
            prefix = f"/{token}/"
            if not hmac.compare_digest(route[:len(prefix)].encode(), prefix.encode()):
                self._send(404, "text/plain; charset=utf-8", b"not found (the view's address is the one printed "
                           b"when it started)\n")
                return
            route = route[len(prefix) - 1:]
            if route in ("/", "/index.html"):
                try:
                    body = view.page().encode("utf-8")
                except MemsifError as e:
                    self._send(503, "text/plain; charset=utf-8", f"the memory file cannot be read now: {e}\n"
                               .encode("utf-8", "replace"))
                    return
                self._send(200, "text/html; charset=utf-8", body)
            elif route == "/stamp":
                self._send(200, "application/json", json.dumps({"stamp": stamp(path)}).encode("ascii"))
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found\n")

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Content-Security-Policy", policy(live=True))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            log.debug("view server: " + format, *args)

    server = ThreadingHTTPServer((HOST, port), Handler)
    server.daemon_threads = True
    url = f"http://{HOST}:{server.server_address[1]}/{token}/"
    main = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _interrupt) if main else None  # `kill` stops it as Ctrl-C does
    try:
        ready(url)
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if main:
            signal.signal(signal.SIGTERM, before)
    return {"url": url, "requests": counts["requests"], "renders": view.renders}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
