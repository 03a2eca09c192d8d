"""The commands that only read a memory file (opened read-only): search, context, ask, facts,
messages, show, stats. Each returns its ``--json`` document; its renderer is what people read."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import click

from memsif_lite import Memory
from memsif_lite.checks import BUDGET_RANGE, K_RANGE

from .boundary import command
from .options import file_options, filter_options, llm_options, open_memory
from .output import (Heading, clip, day, fields_of, id_list, local, minutes, one_line, output, plural, stats_lines,
                     table)

__all__ = ["ask", "context", "facts", "messages", "search", "show", "stats", "timeline", "timeline_lines"]


def _search_lines(doc: Mapping[str, Any], **_: Any) -> Iterator[str]:
    if not doc["results"]:
        yield "no results"
    for h in doc["results"]:
        if doc["level"] == "message":
            yield f"[{h.id}] {minutes(h.at)} {h.speaker}: {h.text}"
        else:
            yield f"[{h.id}] {minutes(h.at)} ({plural(len(h.message_ids), 'message')})"
            yield "      " + h.text.replace("\n", "\n      ")


@command()
@click.argument("query")
@file_options
@click.option("-k", default=10, show_default=True, type=click.IntRange(*K_RANGE), help="Number of results.")
@click.option("--level", type=click.Choice(["message", "segment", "trajectory"]), default="message", show_default=True)
@filter_options
@output(_search_lines)
def search(query: str, db: str, config: str | None, k: int, level: str, filters: dict[str, Any]) -> dict[str, Any]:
    """Hybrid (dense + BM25) search of the memory; the filters apply inside the search."""
    with open_memory(db, config, read_only=True) as mem:
        hits = mem.search(query, k=k, level=level, **filters)
    return {"query": query, "level": level, "k": k, "results": hits}


@command()
@click.argument("question")
@file_options
@click.option("--budget", default=2000, show_default=True, type=click.IntRange(*BUDGET_RANGE),
              help="Context budget in tokens.")
@filter_options
@output(lambda doc, **_: [doc["text"]])
def context(question: str, db: str, config: str | None, budget: int, filters: dict[str, Any]) -> dict[str, Any]:
    """Print a ready-to-paste memory context for QUESTION (no LLM call, nothing written)."""
    with open_memory(db, config, read_only=True) as mem:
        c = mem.context(question, budget_tokens=budget, **filters)
    return {**fields_of(c), "message_ids": c.message_ids}


def _answer_lines(doc: Mapping[str, Any], *, show_evidence: int, **_: Any) -> Iterator[str]:
    yield Heading(doc["text"])
    if doc["extractive"]:
        yield "(extractive answer: the most relevant stored sentence; configure --llm for a generated one)"
    for f in doc["facts"]:
        old = f"  [superseded {day(f.valid_to)}]" if f.valid_to is not None else ""
        refs = f"{'message' if len(f.message_ids) == 1 else 'messages'} {', '.join(map(str, f.message_ids))}"
        yield f"  fact {f.kind}#{f.id}: {clip(f.stmt)}{old}  ({refs})"
    evidence = doc["evidence"]
    for e in evidence[:show_evidence]:
        yield f"  [{day(e.local_at)}] #{id_list(e.message_ids)} {e.speaker}: {clip(e.stmt)}"
    if len(evidence) > show_evidence:
        yield f"  … {plural(len(evidence) - show_evidence, 'more evidence item')} (--evidence N or --json)"


@command()
@click.argument("question")
@file_options
@llm_options
@click.option("--budget", default=2000, show_default=True, type=click.IntRange(*BUDGET_RANGE),
              help="Context budget in tokens.")
@filter_options
@click.option("--evidence", "show_evidence", default=5, show_default=True, type=click.IntRange(min=0),
              help="Evidence items to list (--json has all of them).")
@output(_answer_lines)
def ask(question: str, db: str, config: str | None, llm: str | None, api_base: str | None, api_key: str | None,
        budget: int, filters: dict[str, Any], show_evidence: int) -> dict[str, Any]:
    """Answer QUESTION from memory, then list the facts and the best evidence with dates and ids."""
    with open_memory(db, config, llm, api_base, api_key) as mem:
        a = mem.ask(question, budget_tokens=budget, **filters)
    return {"question": question, **fields_of(a)}


def _facts_lines(doc: Mapping[str, Any], *, subject: str | None, ftype: str | None, include_superseded: bool,
                 filters: dict[str, Any], **_: Any) -> Iterator[str]:
    if "active_facts" in doc:
        actives = doc["active_facts"]
        if not actives:
            yield "no ActiveFacts yet (they are promoted from the evidence of questions asked with `memsif ask`)"
        else:
            yield from table(["id", "subject", "messages", "statement"],
                             [(a.id, a.subject, id_list(a.message_ids), one_line(a.stmt)) for a in actives], right=[0])
        return
    core = doc["facts"]
    if not core:
        filtered = subject is not None or ftype is not None or any(filters.values())
        yield "no CoreFacts match" if filtered else "no CoreFacts yet"
        return
    until = ["until"] if include_superseded else []
    rows = [[f.id, f.type, f.subject, day(f.valid_from)] + ([day(f.valid_to)] if include_superseded else [])
            + [one_line(f.stmt)] for f in core]
    yield from table(["id", "type", "subject", "since", *until, "statement"], rows, right=[0])


@command()
@file_options
@click.option("--subject", default=None, help="Only facts about this subject (case-insensitive).")
@click.option("--type", "ftype", default=None, help="Only facts of this type.")
@click.option("--all", "include_superseded", is_flag=True, help="Include superseded facts.")
@click.option("--active", is_flag=True, help="List promoted ActiveFacts instead.")
@filter_options
@output(_facts_lines)
def facts(db: str, config: str | None, subject: str | None, ftype: str | None, include_superseded: bool,
          active: bool, filters: dict[str, Any]) -> dict[str, Any]:
    """List CoreFacts as a table, or ActiveFacts with --active. Filters: --speaker is the subject;
    --session/--since/--until select facts with a source message there."""
    if active and any(v for k, v in filters.items() if k != "known_at"):
        raise click.UsageError("--speaker/--session/--since/--until/--as-of filter CoreFacts, not --active")
    with open_memory(db, config, read_only=True) as mem:
        if active:
            return {"active_facts": mem.active_facts(known_at=filters["known_at"])}
        return {"facts": mem.facts(subject=subject, type=ftype, include_superseded=include_superseded, **filters)}


def _messages_lines(doc: Mapping[str, Any], **_: Any) -> Iterator[str]:
    if not doc["messages"]:
        yield "no messages match" if doc["offset"] == 0 else f"no messages after the first {doc['offset']}"
    for m in doc["messages"]:
        session = f" (session {m.session})" if m.session is not None else ""
        yield f"[{m.id}] {local(m)}{session} {m.speaker}: {one_line(m.text)}"
    if doc["more"]:
        yield f"… more: --offset {doc['offset'] + doc['limit']}"


@command()
@file_options
@filter_options
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=0), help="At most this many.")
@click.option("--offset", default=0, type=click.IntRange(min=0), help="Skip this many first.")
@output(_messages_lines)
def messages(db: str, config: str | None, filters: dict[str, Any], limit: int, offset: int) -> dict[str, Any]:
    """List stored messages in the order they were added, filtered, one page at a time."""
    with open_memory(db, config, read_only=True) as mem:
        page = mem.messages(**filters, limit=limit + 1, offset=offset)
    return {"messages": page[:limit], "offset": offset, "limit": limit, "more": len(page) > limit}


def timeline(mem: Memory, trajectory: int | None = None, since: str | None = None, limit: int = 0) -> dict[str, Any]:
    """The segments of ``trajectory`` (all without), ending at or after ``since``; at most ``limit``
    of them (0: all) — the first from ``since`` on, else the latest — with their trajectories and
    messages, and how many segments were left out."""
    segs = mem.segments()
    trajs = mem.trajectories()
    if trajectory is not None:
        if not any(t.id == trajectory for t in trajs):
            raise click.ClickException(f"no trajectory with id {trajectory}")
        segs = [s for s in segs if s.trajectory_id == trajectory]
    if since is not None:
        start = mem.messages(since=since, limit=1)  # validates the time; a date alone is its start
        segs = [s for s in segs if start and s.end >= start[0].at] if start else []
    total = len(segs)
    if limit and total > limit:
        segs = segs[:limit] if since is not None else segs[-limit:]
    shown = {s.id for s in segs}
    ids = {m for s in segs for m in s.message_ids}
    return {"trajectories": [t for t in trajs if shown & set(t.segment_ids)], "segments": segs,
            "messages": [m for m in mem.messages() if m.id in ids] if ids else [],
            "omitted_segments": total - len(segs)}


def timeline_lines(doc: Mapping[str, Any], *, width: int = 100, filtered: bool = False,
                   since: str | None = None) -> Iterator[str]:
    segs = {s.id: s for s in doc["segments"]}
    if not segs:
        yield "no segments match" if filtered else "no segments yet"
        return
    texts = {m.id: m for m in doc["messages"]}
    groups: list[tuple[str, list[Any]]] = []
    for t in doc["trajectories"]:
        title = (f"Trajectory {t.id}: {t.label}  ({minutes(t.start)} → {minutes(t.end)}, "
                 f"{plural(len(t.segment_ids), 'segment')})")
        groups.append((title, [segs[s] for s in t.segment_ids if s in segs]))
    open_segs = [s for s in segs.values() if s.trajectory_id is None]
    if open_segs:
        groups.append(("Not yet linked to a trajectory", open_segs))
    for title, ss in groups:
        yield Heading(title)
        for s in ss:
            yield f"  Segment {s.id} [{minutes(s.start)}] {s.label}"
            for mid in s.message_ids:
                m = texts.get(mid)
                if m is None:
                    continue
                line = f"{m.speaker}: {one_line(m.text)}"
                yield "    " + (line if len(line) <= width else line[: width - 1] + "…")
    if doc["omitted_segments"]:
        which = "later" if since is not None else "earlier"
        yield (f"… {plural(doc['omitted_segments'], 'more segment')} ({which}): --limit 0 shows all, "
               "--since DATE starts later")


@command()
@file_options
@click.option("--trajectory", type=int, default=None, help="Only this trajectory's segments.")
@click.option("--since", default=None, help="Only segments ending at or after this time (ISO 8601 or a date).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=0),
              help="At most this many segments (0: all): the first from --since on, else the latest.")
@output(lambda doc, trajectory, since, **_: timeline_lines(doc, since=since,
                                                           filtered=trajectory is not None or since is not None))
def show(db: str, config: str | None, trajectory: int | None, since: str | None, limit: int) -> dict[str, Any]:
    """Print segments grouped by trajectory as a timeline."""
    with open_memory(db, config, read_only=True) as mem:
        return timeline(mem, trajectory, since, limit)


@command()
@file_options
@output(lambda st, **_: stats_lines(st))
def stats(db: str, config: str | None) -> dict[str, int]:
    """Counts of messages, structure, facts and LLM calls."""
    with open_memory(db, config, read_only=True) as mem:
        return mem.stats()
