"""``memsif demo``: a memory built from a bundled sample conversation, and a short tour of it."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import click

from memsif_lite.importers import read_jsonl

from .boundary import command
from .options import config_option, open_memory
from .output import Heading, day, fields_of, id_list, minutes, output, stats_lines
from .reading import timeline, timeline_lines
from .writing import add_labeled

__all__ = ["demo"]

_SEARCHES = (("Which company did Maya join?", "message", 3), ("Where does Maya live now?", "message", 3),
             ("What did Leo do with his running shoes?", "segment", 1))
_QUESTIONS = ("Who is Maya's manager?", "What is the name of Leo's dog?")


def _tour_lines(doc: Mapping[str, Any], **_: Any) -> Iterator[str]:
    where = f"Memory file {doc['db']}" if doc["db"] is not None else "A temporary memory file"
    yield Heading(f"\n{where}: built in {doc['seconds']:.1f}s, offline (no LLM configured)")
    yield from stats_lines(doc["stats"], indent="  ")
    yield Heading("\nStructure: Topical Segments grouped into Event Trajectories")
    yield from timeline_lines(doc["timeline"], width=90)
    for s in doc["searches"]:
        yield Heading(f"\nsearch{' by segment' if s['level'] == 'segment' else ''}: {s['query']}")
        for h in s["results"]:
            if s["level"] == "segment":
                yield "  " + h.text.replace("\n", "\n  ")
            else:
                yield f"  [{h.id}] {minutes(h.at)} {h.speaker}: {h.text}"
    if doc["facts"]:
        yield Heading("\nCoreFacts extracted offline (with history)")
        for f in doc["facts"][:14]:
            until = f"  [superseded {day(f.valid_to)}]" if f.valid_to else ""
            yield f"  {f.type:10} {f.stmt}{until}"
    for a in doc["answers"]:
        yield Heading(f"\nask: {a['question']}")
        yield f"  {a['text']}\n  (extractive answer, offline; {a['tokens_in']} context tokens; best evidence:)"
        for e in a["evidence"][:3]:
            yield f"    [{day(e.at)}] #{id_list(e.message_ids)} {e.speaker}: {e.stmt[:100]}"
    if doc["db"] is not None:
        yield (f"\nDone. The demo memory stays in {doc['db']}: "
               f"try memsif search --db {doc['db']} \"where does Maya live?\"")
    else:
        yield "\nDone. Try: memsif ingest FILE --db my.db && memsif search --db my.db \"...\""


@command()
@click.option("--db", envvar="MEMSIF_DB", default=None, type=click.Path(dir_okay=False),
              help="Where to write the demo memory (default: a temporary file, deleted afterwards).")
@config_option
@output(_tour_lines)
def demo(db: str | None, config: str | None) -> dict[str, Any]:
    """Build a memory from a bundled sample conversation and take a short tour."""
    sample = resources.files("memsif_lite.data").joinpath("sample_conversation.jsonl")
    with resources.as_file(sample) as p:
        items = [(f"{p.name}:{i}", m) for i, m in enumerate(read_jsonl(p), start=1)]
    with tempfile.TemporaryDirectory(prefix="memsif-demo-") as tmp:
        t0 = time.perf_counter()
        with open_memory(db if db is not None else str(Path(tmp) / "demo.db"), config, create=True) as mem:
            ids = add_labeled(mem, items, label="building the demo memory")  # a second run adds nothing
            seconds = time.perf_counter() - t0
            return {"db": db, "added": len(ids), "seconds": round(seconds, 3), "stats": mem.stats(),
                    "timeline": timeline(mem),
                    "searches": [{"query": q, "level": level, "k": k, "results": mem.search(q, k=k, level=level)}
                                 for q, level, k in _SEARCHES],
                    "facts": mem.facts(include_superseded=True),
                    "answers": [{"question": q, **fields_of(mem.ask(q, budget_tokens=400))} for q in _QUESTIONS]}
