"""The ``memsif`` command line; it mirrors the Python API."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

import click

from .config import Config
from .errors import MemsifError

__all__ = ["main"]


def _open(db: str, config: str | None, llm: str | None, api_base: str | None):
    from .memory import Memory

    cfg = Config.from_file(config) if config else None
    kwargs = {"api_base": api_base} if api_base else None
    return Memory(db, config=cfg, llm=llm, llm_kwargs=kwargs)


def _dt(d: Any) -> str:
    return d.isoformat(sep=" ", timespec="minutes") if d is not None else ""


db_option = click.option("--db", envvar="MEMSIF_DB", required=True, type=click.Path(dir_okay=False),
                         help="Memory file (also from MEMSIF_DB).")
config_option = click.option("--config", "config", envvar="MEMSIF_CONFIG", type=click.Path(exists=True, dir_okay=False),
                             help="Config file (JSON or TOML).")
llm_option = click.option("--llm", envvar="MEMSIF_LLM", default=None,
                          help="litellm model string, e.g. openai/gpt-4o-mini or ollama/qwen3:4b (also MEMSIF_LLM).")
api_base_option = click.option("--api-base", envvar="MEMSIF_API_BASE", default=None,
                               help="Base URL of an OpenAI-compatible server (vLLM, Ollama...).")


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemsifError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="memsif_lite")
def main() -> None:
    """memsif: long-term memory for LLM agents in one SQLite file."""


def _ingest(mem, items: list[dict], *, label: str = "ingesting", batch: int = 128) -> list[int]:
    ids: list[int] = []
    with click.progressbar(length=len(items), label=label, file=sys.stderr) as bar:
        for start in range(0, len(items), batch):
            ids += mem.add_many(items[start:start + batch])
            bar.update(min(batch, len(items) - start))
    return ids


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@db_option
@config_option
@llm_option
@api_base_option
def ingest(file: str, db: str, config: str | None, llm: str | None, api_base: str | None) -> None:
    """Add the messages of FILE (JSONL or LoCoMo JSON) to the memory."""
    from .importers import read_any

    items = read_any(file)
    t0 = time.perf_counter()
    with _open(db, config, llm, api_base) as mem:
        ids = _ingest(mem, items)
        stats = mem.stats()
    secs = time.perf_counter() - t0
    click.echo(f"added {len(ids)} messages in {secs:.1f}s ({len(ids) / max(secs, 1e-9):.0f}/s)")
    click.echo(", ".join(f"{k} {v}" for k, v in stats.items()))


@main.command()
@db_option
@click.argument("query")
@click.option("-k", default=10, show_default=True, help="Number of results.")
@click.option("--level", type=click.Choice(["message", "segment", "trajectory"]), default="message", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON lines output.")
def search(db: str, query: str, k: int, level: str, as_json: bool) -> None:
    """Hybrid (dense + BM25) search of the memory."""
    with _open(db, None, None, None) as mem:
        hits = mem.search(query, k=k, level=level)
    for h in hits:
        if as_json:
            click.echo(json.dumps({"id": h.id, "level": h.level, "score": round(h.score, 6), "speaker": h.speaker,
                                   "text": h.text, "at": h.at.isoformat(), "session": h.session,
                                   "message_ids": list(h.message_ids), "source_ids": list(h.source_ids)},
                                  ensure_ascii=False))
        else:
            text = h.text if level == "message" else h.text.replace("\n", "\n      ")
            click.echo(f"[{h.id}] {_dt(h.at)} {h.speaker if level == 'message' else ''}{': ' if level == 'message' else ''}{text}")


@main.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
def stats(db: str, as_json: bool) -> None:
    """Counts of messages, structure, facts and LLM calls."""
    with _open(db, None, None, None) as mem:
        s = mem.stats()
    if as_json:
        click.echo(json.dumps(s))
    else:
        for k, v in s.items():
            click.echo(f"{k:14} {v}")


def _print_timeline(mem, *, width: int = 100) -> None:
    segs = {s.id: s for s in mem.segments()}
    texts = {m.id: m for m in mem.messages()}
    groups: list[tuple[str, list]] = []
    for t in mem.trajectories():
        groups.append((f"Trajectory {t.id}: {t.label}  ({_dt(t.start)} → {_dt(t.end)}, {len(t.segment_ids)} segments)",
                       [segs[s] for s in t.segment_ids]))
    open_segs = [s for s in segs.values() if s.trajectory_id is None]
    if open_segs:
        groups.append(("Open segment (not yet linked to a trajectory)", open_segs))
    for title, ss in groups:
        click.secho(title, bold=True)
        for s in ss:
            click.echo(f"  Segment {s.id} [{_dt(s.start)}] {s.label}")
            for mid in s.message_ids:
                m = texts[mid]
                line = f"{m.speaker}: {m.text}"
                click.echo("    " + (line if len(line) <= width else line[: width - 1] + "…"))


@main.command()
@db_option
def show(db: str) -> None:
    """Print segments grouped by trajectory as a timeline."""
    with _open(db, None, None, None) as mem:
        _print_timeline(mem)


def _answer_json(a) -> str:
    return json.dumps({
        "answer": a.text, "extractive": a.extractive, "sufficient": a.sufficient, "context": a.context,
        "evidence": [{"message_ids": list(e.message_ids), "speaker": e.speaker, "stmt": e.stmt,
                      "at": e.at.isoformat(), "session": e.session, "source_ids": list(e.source_ids),
                      "notes": list(e.notes)} for e in a.evidence],
        "facts": [{"kind": f.kind, "id": f.id, "subject": f.subject, "type": f.type, "stmt": f.stmt,
                   "message_ids": list(f.message_ids)} for f in a.facts],
        "tokens_in": a.tokens_in, "tokens_out": a.tokens_out, "llm_calls": a.llm_calls, "timings_ms": a.timings_ms,
    }, ensure_ascii=False)


@main.command()
@db_option
@config_option
@llm_option
@api_base_option
@click.argument("question")
@click.option("--budget", default=2000, show_default=True, help="Context budget in tokens.")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
def ask(db: str, config: str | None, llm: str | None, api_base: str | None, question: str, budget: int,
        as_json: bool) -> None:
    """Answer QUESTION from memory, then show the evidence with dates and ids."""
    with _open(db, config, llm, api_base) as mem:
        a = mem.ask(question, budget_tokens=budget)
    if as_json:
        click.echo(_answer_json(a))
        return
    click.secho(a.text, bold=True)
    if a.extractive:
        click.echo("(extractive answer: the most relevant stored sentence; configure --llm for a generated one)")
    for f in a.facts:
        click.echo(f"  fact {f.kind}#{f.id}: {f.stmt}  (messages {', '.join(map(str, f.message_ids))})")
    for e in a.evidence:
        click.echo(f"  [{_dt(e.at)}] #{','.join(map(str, e.message_ids))} {e.speaker}: {e.stmt}")


@main.command()
@db_option
@click.argument("question")
@click.option("--budget", default=2000, show_default=True, help="Context budget in tokens.")
@click.option("--json", "as_json", is_flag=True, help="JSON output (text plus items).")
def context(db: str, question: str, budget: int, as_json: bool) -> None:
    """Print a ready-to-paste memory context for QUESTION (no LLM call, nothing written)."""
    with _open(db, None, None, None) as mem:
        c = mem.context(question, budget_tokens=budget)
    if as_json:
        click.echo(json.dumps({"text": c.text, "tokens": c.tokens, "sufficient": c.sufficient,
                               "message_ids": list(c.message_ids)}, ensure_ascii=False))
    else:
        click.echo(c.text)


@main.command()
@db_option
@click.option("--subject", default=None)
@click.option("--type", "ftype", default=None)
@click.option("--all", "include_superseded", is_flag=True, help="Include superseded facts.")
@click.option("--active", is_flag=True, help="List promoted ActiveFacts instead.")
def facts(db: str, subject: str | None, ftype: str | None, include_superseded: bool, active: bool) -> None:
    """List CoreFacts (JSON lines), or ActiveFacts with --active."""
    with _open(db, None, None, None) as mem:
        if active:
            for a in mem.active_facts():
                click.echo(json.dumps({"id": a.id, "subject": a.subject, "stmt": a.stmt, "message_ids": list(a.message_ids),
                                       "queries": list(a.queries)}, ensure_ascii=False))
            return
        for f in mem.facts(subject=subject, type=ftype, include_superseded=include_superseded):
            click.echo(json.dumps({"id": f.id, "subject": f.subject, "type": f.type, "stmt": f.stmt,
                                   "valid_from": f.valid_from.isoformat(),
                                   "valid_to": f.valid_to.isoformat() if f.valid_to else None,
                                   "superseded_by": f.superseded_by, "message_ids": list(f.message_ids)},
                                  ensure_ascii=False))


@main.command()
@db_option
@click.option("--message", "message_id", type=int, default=None, help="Message id to forget.")
@click.option("--fact", "fact_id", type=int, default=None, help="CoreFact id to forget.")
def forget(db: str, message_id: int | None, fact_id: int | None) -> None:
    """Delete a message (and everything derived only from it) or a fact."""
    with _open(db, None, None, None) as mem:
        mem.forget(message_id=message_id, fact_id=fact_id)
    click.echo("forgotten")


@main.command("export")
@db_option
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="JSON-lines file to write.")
def export_cmd(db: str, out: str) -> None:
    """Export everything to JSON lines (import it with `memsif import`)."""
    with _open(db, None, None, None) as mem:
        n = mem.export_to(out)
    click.echo(f"wrote {n} lines to {out}")


@main.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@db_option
def import_cmd(file: str, db: str) -> None:
    """Load an export into a fresh memory file."""
    with _open(db, None, None, None) as mem:
        counts = mem.import_from(file)
        st = mem.stats()
    click.echo(f"imported {counts.get('messages', 0)} messages; " + ", ".join(f"{k} {v}" for k, v in st.items()))


@main.command()
@db_option
@click.argument("dest", type=click.Path(dir_okay=False))
def backup(db: str, dest: str) -> None:
    """Write a consistent copy of the memory file to DEST (safe while others write)."""
    with _open(db, None, None, None) as mem:
        mem.backup(dest)
    click.echo(f"backed up to {dest}")


@main.command()
@db_option
def check(db: str) -> None:
    """Check a memory file: what it is, integrity, schema, indexes and vectors."""
    from .errors import MemsifError as _E
    from .memory import Memory

    try:
        with Memory(db) as mem:
            problems = mem.check()
            st = mem.stats()
    except _E as e:
        click.echo(f"NOT OK: {e}")
        sys.exit(1)
    if problems:
        click.echo("NOT OK:")
        for p in problems:
            click.echo(f"  - {p}")
        sys.exit(1)
    click.echo(f"OK: a memsif memory file (schema, integrity, full-text index and vectors check out); "
               f"{st['messages']} messages, {st['segments']} segments, {st['core_facts']} facts")


@main.command()
@click.option("--db", envvar="MEMSIF_DB", default=None, type=click.Path(dir_okay=False),
              help="Where to write the demo memory (default: a temporary file).")
def demo(db: str | None) -> None:
    """Build a memory from a bundled sample conversation and take a short tour."""
    from .importers import read_jsonl
    from .memory import Memory

    sample = resources.files("memsif_lite.data").joinpath("sample_conversation.jsonl")
    with resources.as_file(sample) as p:
        items = read_jsonl(p)
    tmp = None
    if db is None:
        tmp = tempfile.TemporaryDirectory(prefix="memsif-demo-")
        db = str(Path(tmp.name) / "demo.db")
    t0 = time.perf_counter()
    with Memory(db) as mem:
        _ingest(mem, items, label="building the demo memory")
        click.secho(f"\nMemory file {db}: built in {time.perf_counter() - t0:.1f}s, offline (no LLM configured)",
                    bold=True)
        for k, v in mem.stats().items():
            click.echo(f"  {k:14} {v}")
        click.secho("\nStructure: Topical Segments grouped into Event Trajectories", bold=True)
        _print_timeline(mem, width=90)
        for q in ("Which company did Maya join?", "Where does Maya live now?"):
            click.secho(f"\nsearch: {q}", bold=True)
            for h in mem.search(q, k=3):
                click.echo(f"  [{h.id}] {_dt(h.at)} {h.speaker}: {h.text}")
        q = "What did Leo do with his running shoes?"
        click.secho(f"\nsearch by segment: {q}", bold=True)
        for h in mem.search(q, k=1, level="segment"):
            click.echo("  " + h.text.replace("\n", "\n  "))
        facts = mem.facts(include_superseded=True)
        if facts:
            click.secho("\nCoreFacts extracted offline (with history)", bold=True)
            for f in facts[:14]:
                until = f"  [superseded {f.valid_to:%Y-%m-%d}]" if f.valid_to else ""
                click.echo(f"  {f.type:10} {f.stmt}{until}")
        for q in ("Who is Maya's manager?", "What is the name of Leo's dog?"):
            a = mem.ask(q, budget_tokens=400)
            click.secho(f"\nask: {q}", bold=True)
            click.echo(f"  {a.text}\n  (extractive answer, offline; {a.tokens_in} context tokens; best evidence:)")
            for e in a.evidence[:3]:
                click.echo(f"    [{e.at:%Y-%m-%d}] #{','.join(map(str, e.message_ids))} {e.speaker}: {e.stmt[:100]}")
    if tmp is not None:
        tmp.cleanup()
    click.echo("\nDone. Try: memsif ingest FILE --db my.db && memsif search --db my.db \"...\"")


if __name__ == "__main__":  # pragma: no cover
    main()
