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
        for q in ("Where does Maya live now?", "How did Leo do in his races?", "What pets do they have?"):
            click.secho(f"\nsearch: {q}", bold=True)
            for h in mem.search(q, k=3):
                click.echo(f"  [{h.id}] {_dt(h.at)} {h.speaker}: {h.text}")
        if hasattr(mem, "facts"):
            facts = mem.facts()
            if facts:
                click.secho("\nCoreFacts extracted offline", bold=True)
                for f in facts[:12]:
                    click.echo(f"  {f.type:10} {f.subject}: {f.stmt}")
    if tmp is not None:
        tmp.cleanup()
    click.echo("\nDone. Try: memsif ingest FILE --db my.db && memsif search --db my.db \"...\"")


if __name__ == "__main__":  # pragma: no cover
    main()
