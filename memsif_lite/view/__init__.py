"""See your memory: the whole file as one self-contained HTML page (``memsif view``, :meth:`Memory.view`).

The page works offline from anywhere (a USB stick): its CSS, script and data are inline, it loads
nothing and connects nowhere. It shows a timeline of Topical Segments by day with each Event
Trajectory as a coloured thread (zoom from years to hours; gaps marked), CoreFacts as bars over
their validity (a superseded one ends where it was superseded; a click shows its history and the
messages it rests on), a search over messages and facts with speaker and time filters, the
backlog of pending steps, and the file's model, schema version and sizes.

- :mod:`.data` — the document: read through the data-access layer in one snapshot, packed in columns;
- :mod:`.page` — the page: template, Content-Security-Policy, escaping, writing it (0600);
- :mod:`.live` — ``memsif view --serve``: the page served on 127.0.0.1, remade as the file changes;
- ``page.html``, ``view.css``, ``view.js`` — the page's parts (package data).
"""

from __future__ import annotations

from pathlib import Path

from ..db import Database
from .data import gather
from .page import ViewPage, render

__all__ = ["ViewPage", "view_page"]


def view_page(db: Database, path: Path, *, live: str | None = None) -> ViewPage:
    """The page of the memory file at ``path`` (``db`` its connection, in the caller's snapshot)."""
    doc = gather(db, path, live=live)
    return ViewPage(path, render(doc), doc["stats"])
