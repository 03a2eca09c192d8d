"""``memsif view``: the memory as one self-contained HTML page, or that page served live on 127.0.0.1."""

from __future__ import annotations

import sys
import webbrowser
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from .boundary import command
from .options import file_options, open_memory
from .output import echo, output, plural

__all__ = ["view"]


def _view_lines(doc: Mapping[str, Any], **_: Any) -> Iterator[str]:
    st = doc["stats"]
    holds = (f"{plural(st['messages'], 'message')}, {plural(st['segments'], 'segment')}, "
             f"{plural(st['trajectories'], 'trajectory', 'trajectories')}, {plural(st['core_facts'], 'CoreFact')}")
    if "url" in doc:
        yield (f"served {doc['url']} ({plural(doc['requests'], 'request')}, {plural(doc['renders'], 'page')} made); "
               f"at the end the file held {holds}")
    else:
        size = f"{doc['bytes'] / 1e6:.1f} MB" if doc["bytes"] >= 1e6 else f"{doc['bytes'] / 1e3:.1f} kB"
        yield f"wrote {doc['out']} ({size}): {holds}"


@command()
@file_options
@click.option("--out", default="memory.html", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the page (created 0600; a previous view there is replaced, any other file kept).")
@click.option("--open", "open_page", is_flag=True, help="Open the page in the default web browser.")
@click.option("--serve", is_flag=True,
              help="Serve the page on 127.0.0.1 instead, made again as the file changes (read-only); "
                   "Ctrl-C (or SIGTERM) stops.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="The port for --serve (0: any free port).")
@output(_view_lines)
def view(db: str, config: str | None, out: str, open_page: bool, serve: bool, port: int) -> dict[str, Any]:
    """Write the memory as one self-contained HTML page: a timeline of segments and trajectories,
    facts over their validity with their history, a search box, the backlog and the file's details.
    It needs no server and no network (inline script, style and data; a strict Content-Security-Policy)."""
    ctx = click.get_current_context()
    given = {name for name in ("out", "port") if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT}
    if serve and "out" in given:
        raise click.UsageError("--serve serves the page instead of writing it: give --out or --serve, not both")
    if not serve and "port" in given:
        raise click.UsageError("--port is the port of --serve")
    if serve:
        return _serve(db, config, port, open_page)
    with open_memory(db, config, read_only=True) as mem:
        page = mem.view(out)
    if open_page:
        webbrowser.open(Path(out).resolve().as_uri())
    return {"db": db, "out": out, "bytes": page.bytes, "stats": page.stats}


def _serve(db: str, config: str | None, port: int, open_page: bool) -> dict[str, Any]:
    from memsif_lite.view.live import serve

    last: dict[str, Any] = {}
    ctx = click.get_current_context()  # the server's threads open the file with this command's key

    def make(stamp: str) -> str:
        with ctx.scope(cleanup=False), open_memory(db, config, read_only=True) as mem:  # as any read command
            page = mem.view(live=stamp)
        last["stats"] = page.stats
        return page.html

    def ready(url: str) -> None:
        echo(f"serving a live view of {db} at {url} (read-only, refreshed as the file changes); Ctrl-C stops",
             err=True)
        sys.stderr.flush()
        if open_page:
            webbrowser.open(url)

    try:
        result = serve(Path(db), make, port=port, ready=ready)
    except OSError as e:
        if e.filename is not None:
            raise
        raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}; choose another --port "
                                   "(0: any free one)") from e
    return {"db": db, **result, "stats": last["stats"]}
