"""The commands that add to or change a memory file: ingest, add, forget, process."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from memsif_lite import Config, Memory
from memsif_lite.errors import InvalidMessageError
from memsif_lite.importers import SpeakerMap, check_messages, parse_speaker_map, read_labeled

from .boundary import command, nothing_added
from .options import file_options, llm_options, open_memory
from .output import echo, local, output, plural, stats_line

__all__ = ["add", "add_labeled", "forget", "ingest", "process", "read_messages"]


def read_messages(file: str, speaker_map: SpeakerMap) -> list[tuple[str, dict[str, Any]]]:
    """(where, message) for every message of FILE (``-``: standard input), JSONL or LoCoMo."""
    name = "<stdin>" if file == "-" else file
    try:
        if file == "-":
            text = sys.stdin.buffer.read().decode("utf-8")
        else:
            text = Path(file).read_bytes().decode("utf-8")
        return read_labeled(text, name, speaker_map)
    except UnicodeDecodeError as e:
        raise click.ClickException(f"cannot read {name}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        raise click.ClickException(
            f"cannot read {name}: not a JSONL or LoCoMo conversation ({type(e).__name__}: {e})") from None


def _checked(labeled: list[tuple[str, dict[str, Any]]], config: str | None) -> list[tuple[str, dict[str, Any]]]:
    """``labeled`` once every message passed the checks :meth:`Memory.add_many` makes, run before
    any memory file is opened: bad input creates nothing, so a failed command never has a file
    to remove (and never removes one another process has just written to)."""
    cfg = Config.from_file(config) if config else Config()
    try:
        check_messages([m for _, m in labeled], cfg.max_message_chars)
    except InvalidMessageError as e:
        raise _refused(labeled, e) from None
    return labeled


def _refused(labeled: list[tuple[str, dict[str, Any]]], e: InvalidMessageError) -> click.ClickException:
    where = labeled[e.index][0]
    return click.ClickException(f"{where}: {e.reason}" if where else e.reason)


def add_labeled(mem: Memory, labeled: list[tuple[str, dict[str, Any]]], *, label: str = "ingesting") -> list[int]:
    """All or nothing, in one transaction: every message is validated before anything is written
    (an error names its input line); messages already in the file are skipped."""
    with contextlib.ExitStack() as stack:
        bars: list[Any] = []

        def progress(n: int) -> None:  # the bar appears once validation passed and storing began
            if not bars:
                bars.append(stack.enter_context(click.progressbar(length=len(labeled), label=label, file=sys.stderr)))
            bars[0].update(n)

        try:
            return mem.add_many([m for _, m in labeled], progress=progress, skip_existing=True)
        except InvalidMessageError as e:
            raise _refused(labeled, e) from None


def _ingest_lines(doc: Mapping[str, Any], **_: Any) -> list[str]:
    already = f", skipped {doc['skipped']} already present" if doc["skipped"] else ""
    return [f"added {plural(doc['added'], 'message')}{already} in {doc['seconds']:.1f}s", stats_line(doc["stats"])]


@command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@file_options
@llm_options
@click.option("--speaker-map", default=None, metavar="ROLE=NAME,...",
              help="Speakers for chat lines {\"role\",\"content\"}, e.g. user=Ana,assistant=Bot "
                   "(default: the role itself).")
@click.option("--later", is_flag=True, help="Store now; build segments and facts later with `memsif process` "
                                           "(useful with a slow --llm).")
@output(_ingest_lines)
def ingest(file: str, db: str, config: str | None, llm: str | None, api_base: str | None, api_key: str | None,
           speaker_map: str | None, later: bool) -> dict[str, Any]:
    """Add the messages of FILE (JSONL, chat JSONL or LoCoMo JSON; - for standard input) to the
    memory, creating it if needed. All or nothing: a bad line (named by its number) adds nothing.
    Idempotent: messages already in the file are skipped and counted."""
    with nothing_added():
        smap = parse_speaker_map(speaker_map)
        labeled = _checked(read_messages(file, smap), config)
        if smap.unused():
            echo(f"Warning: --speaker-map names roles no line has: {', '.join(smap.unused())}", err=True)
        t0 = time.perf_counter()
        mem = open_memory(db, config, llm, api_base, api_key, create=True, later=later)
    with mem:
        with nothing_added():
            ids = add_labeled(mem, labeled)
        st = mem.stats()
    return {"file": file, "db": db, "added": len(ids), "skipped": len(labeled) - len(ids), "message_ids": ids,
            "seconds": round(time.perf_counter() - t0, 3), "stats": st}


@command()
@click.argument("speaker")
@click.argument("text")
@file_options
@llm_options
@click.option("--at", default=None, help="When it was said (ISO 8601, with its UTC offset if known; default: now).")
@click.option("--session", default=None, help="Session (conversation) it belongs to.")
@click.option("--source-id", default=None, help="Its id in the source conversation.")
@click.option("--later", is_flag=True, help="Store now; build segments and facts later with `memsif process` "
                                           "(useful with a slow --llm).")
@output(lambda doc, **_: [f"{'added' if doc['new'] else 'already present:'} message {doc['id']} "
                          f"({local(doc['message'])})"])
def add(speaker: str, text: str, db: str, config: str | None, llm: str | None, api_base: str | None,
        api_key: str | None, at: str | None, session: str | None, source_id: str | None, later: bool) -> dict[str, Any]:
    """Add one message (SPEAKER said TEXT) to the memory, creating it if needed. Idempotent: a
    message already stored (as `memsif ingest` finds them) is not added again."""
    message = dict(speaker=speaker, text=text, at=at, session=session, source_id=source_id)
    with nothing_added():
        _checked([("", message)], config)
        mem = open_memory(db, config, llm, api_base, api_key, create=True, later=later)
    with mem:
        with nothing_added():
            added = mem.remember([message])[0]
        return {"id": added.id, "new": added.new, "message": mem.get(added.id)}


def _forget_lines(doc: Mapping[str, Any], **_: Any) -> list[str]:
    ids = doc["ids"] if "ids" in doc else [doc["id"]]
    kind = doc["forgot"]
    return [f"forgot {kind} {ids[0]}" if len(ids) == 1 else f"forgot {kind}s {', '.join(map(str, ids))}"]


@command()
@file_options
@click.option("--message", "message_id", type=int, default=None, help="Message id to forget.")
@click.option("--fact", "fact_id", type=int, default=None, help="CoreFact id to forget.")
@click.option("--source-id", default=None, help="Forget the messages with this source id (see --speaker).")
@click.option("--speaker", default=None, help="With --source-id: only this speaker's message.")
@output(_forget_lines)
def forget(db: str, config: str | None, message_id: int | None, fact_id: int | None, source_id: str | None,
           speaker: str | None) -> dict[str, Any]:
    """Delete a message (and everything derived only from it), a fact, or the messages with a source id."""
    if sum(x is not None for x in (message_id, fact_id, source_id)) != 1:
        raise click.UsageError("give exactly one of --message ID, --fact ID or --source-id ID")
    if speaker is not None and source_id is None:
        raise click.UsageError("--speaker goes with --source-id")
    kind = "fact" if fact_id is not None else "message"
    with open_memory(db, config) as mem:
        ids = mem.forget(message_id=message_id, fact_id=fact_id, source_id=source_id, speaker=speaker)
    return {"forgot": kind, "id": ids[0]} if source_id is None else {"forgot": kind, "ids": ids}


@command("process")
@file_options
@llm_options
@click.option("--until-empty/--once", default=True, show_default=True,
              help="Run until the queue is empty, or only --max-steps / --max-seconds worth.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Run at most this many steps.")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop starting new steps after this long.")
@output(lambda doc, **_: [f"ran {plural(doc['steps'], 'step')} in {doc['seconds']:.1f}s; "
                          f"{plural(doc['pending'], 'step')} pending", stats_line(doc["stats"])])
def process(db: str, config: str | None, llm: str | None, api_base: str | None, api_key: str | None,
            until_empty: bool, max_steps: int | None, max_seconds: float | None) -> dict[str, Any]:
    """Run the queued pipeline steps (segment placement, segment close, CoreFacts), with --llm if
    given; LLM calls happen with no transaction open, so other writers never wait for them."""
    if not until_empty and max_steps is None and max_seconds is None:
        max_steps = 1
    with open_memory(db, config, llm, api_base, api_key, later=True) as mem:
        report = mem.process(max_steps=max_steps, max_seconds=max_seconds)
        st = mem.stats()
    return {"steps": report.steps, "pending": report.pending, "seconds": round(report.seconds, 3),
            "stale": report.stale, "stats": st}
