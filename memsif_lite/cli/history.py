"""The change log from the command line: ``log`` (read-only) and ``undo`` (docs/history.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import click

from .boundary import command
from .options import file_options, open_memory
from .output import id_list, minutes, one_line, output, plural

__all__ = ["log", "undo", "change_line"]


def change_line(c: Any) -> str:
    """``#12 2026-12-02 10:31 fact.supersede by rule: Ana: Ana lives in Porto (facts 2,1)``."""
    what = f": {one_line(c.summary)}" if c.summary else ""
    ids = "; ".join(f"{kind.replace('_', ' ')} {id_list(v)}" for kind, v in c.ids.items() if v)
    marks = (f"  [undone by #{c.undone_by}]" if c.undone_by is not None else "") + (
        f"  [from file {c.origin}]" if c.origin else "")
    return f"#{c.id} {minutes(c.at)} {c.op} by {c.actor}{what}" + (f"  ({ids})" if ids else "") + marks


def _log_lines(doc: Mapping[str, Any], **_: Any) -> Iterator[str]:
    if not doc["changes"]:
        yield "no changes match"
    for c in doc["changes"]:
        yield change_line(c)


@command()
@file_options
@click.option("--since", default=None, help="Only changes recorded at or after this time (ISO 8601 or a date).")
@click.option("--until", default=None, help="Only changes recorded at or before this time (ISO 8601 or a date).")
@click.option("--actor", default=None, help="Only changes by this actor (rule, user, llm or llm:MODEL, merge:FILE).")
@click.option("--fact", "fact_id", type=int, default=None, help="Only changes that touched this CoreFact.")
@click.option("--op", default=None, help="Only this operation (fact matches every fact.*; place, link, forget...).")
@click.option("--limit", default=None, type=click.IntRange(min=0), help="At most this many (the oldest first).")
@output(_log_lines)
def log(db: str, config: str | None, since: str | None, until: str | None, actor: str | None, fact_id: int | None,
        op: str | None, limit: int | None) -> dict[str, Any]:
    """The change log: what changed the memory, when (record time), who decided it, and what it touched."""
    with open_memory(db, config, read_only=True) as mem:
        return {"changes": mem.changes(since=since, until=until, actor=actor, fact_id=fact_id, op=op, limit=limit)}


def _undo_lines(doc: Mapping[str, Any], **_: Any) -> Iterator[str]:
    verb = "would undo" if doc["dry_run"] else "undid"
    yield f"{verb} {plural(len(doc['undone']), 'change')} (facts {id_list(doc['fact_ids'])}):"
    for c in doc["undone"]:
        yield "  " + change_line(c)


@command()
@click.argument("change_id", type=int)
@file_options
@click.option("--dry-run", is_flag=True, help="List what would be taken back; write nothing.")
@output(_undo_lines)
def undo(change_id: int, db: str, config: str | None, dry_run: bool) -> dict[str, Any]:
    """Take back CoreFact change CHANGE_ID (see `memsif log`) and the later changes built on it, in one
    transaction; a forget cannot be undone (nothing it removed was kept)."""
    with open_memory(db, config, read_only=dry_run) as mem:
        r = mem.undo(change_id, dry_run=dry_run)
    return {"change_id": r.change_id, "dry_run": r.dry_run, "fact_ids": r.fact_ids, "undone": r.undone}
