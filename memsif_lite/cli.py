"""The ``memsif`` command line; it mirrors the Python API (:class:`memsif_lite.Memory`) and uses
nothing else of the library but its errors and its importers.

Output
    Without ``--json`` a command prints for people: compact lines and aligned tables.
    With ``--json`` it prints exactly ONE JSON document to stdout, and that document is always a
    JSON **object** — never a bare array, never JSON lines. Lists sit under a plural key
    (``"results"``, ``"facts"``, ``"active_facts"``, ``"segments"`` ...), so fields can be added
    later without breaking readers. Everything goes through one encoder (:func:`to_jsonable`):
    dataclasses become objects of their fields under their Python names (``Answer.text`` is
    ``"text"``), datetimes ISO 8601 strings, tuples and sets arrays, paths strings, non-finite
    floats ``null``.

Errors and exit codes
    0: success. 1: an error — printed to stderr as ``Error: ...`` with nothing on stdout, never a
    traceback — or ``check`` found problems (``check --json`` still prints its document).
    2: a usage error (unknown option, missing argument, bad value). ``-v`` before the command
    logs the traceback of an unexpected error at debug level.

Options
    Every command that opens a memory file takes ``--db`` (or MEMSIF_DB) — or ``--user`` /
    ``--agent`` for a file per user/agent under ``--home`` (MEMSIF_HOME) — and ``--config`` (or
    MEMSIF_CONFIG); the commands that can call an LLM (``ingest``, ``ask``) also take ``--llm``,
    ``--api-base`` and ``--api-key`` (or MEMSIF_LLM, MEMSIF_API_BASE, MEMSIF_API_KEY); so does
    ``mcp``, the MCP server. Only
    ``ingest``, ``add``, ``import``, ``demo`` and ``mcp`` create a memory file; the other commands
    refuse a path where there is none (or an empty file), so a mistyped ``--db`` does not leave an
    empty memory file behind, and the commands that only read open the file read-only.

Untrusted text
    Stored text comes from anyone: plain output shows its control characters as escapes
    (:func:`_printable`), and an argument that is not UTF-8 is refused by name (:class:`_Command`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from click.core import ParameterSource

from memsif_lite import Config, Memory
from memsif_lite.errors import InvalidInputError, InvalidMessageError, MemoryFileError, MemsifError
from memsif_lite.homes import make_private_dirs, memory_path
from memsif_lite.importers import SpeakerMap, check_messages, parse_speaker_map, read_jsonl, read_labeled
from memsif_lite.jsonable import to_jsonable

__all__ = ["main", "to_jsonable"]

log = logging.getLogger("memsif_lite")
F = TypeVar("F", bound=Callable[..., Any])


# -- output ----------------------------------------------------------------------------------------
# What a terminal would act on instead of showing: C0 controls but newline and tab (ESC starts a
# sequence that clears the screen or sets the window title; BEL, CR...), DEL, C1 controls (0x9b is
# a CSI on its own) and the bidirectional overrides that reorder what is shown.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_JSON_RAW = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what json.dumps leaves raw of _UNSAFE


def _printable(text: str) -> str:
    """``text`` with every terminal-active character shown as its escape (ESC as ``\\x1b``): stored
    text comes from anyone, and must not drive the terminal of whoever lists it."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def _echo(text: str = "", **kwargs: Any) -> None:
    """Every line of plain output goes through here (and so through :func:`_printable`)."""
    click.secho(_printable(text), **kwargs)


def _emit(doc: Mapping[str, Any]) -> None:
    """One JSON document. JSON escapes C0 controls itself, :data:`_JSON_RAW` is escaped here
    (``\\u009b``: the same value, and only strings can hold such characters)."""
    text = json.dumps(to_jsonable(doc), ensure_ascii=False)
    click.echo(_JSON_RAW.sub(lambda m: f"\\u{ord(m[0]):04x}", text))


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _dt(d: Any) -> str:
    return d.isoformat(sep=" ", timespec="minutes") if d is not None else ""


def _day(d: Any) -> str:
    return f"{d:%Y-%m-%d}" if d is not None else ""


def _ids(ids: Sequence[int]) -> str:
    return ",".join(map(str, ids))


def _messages_ref(ids: Sequence[int]) -> str:
    return f"{'message' if len(ids) == 1 else 'messages'} {', '.join(map(str, ids))}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[int] = ()) -> None:
    """Aligned columns; columns in ``right`` are right-aligned, the last column is never padded."""
    cells = [[_printable(str(c)) for c in headers]] + [[_printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        _echo("  ".join(parts).rstrip())


def _stats_line(st: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in st.items())


def _print_stats(st: Mapping[str, int], indent: str = "") -> None:
    width = max((len(k) for k in st), default=0)
    for k, v in st.items():
        _echo(f"{indent}{k:{width}}  {v}")


# -- shared options and opening a memory -----------------------------------------------------------
def _options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
config_option = click.option("--config", "config", envvar="MEMSIF_CONFIG", type=click.Path(exists=True, dir_okay=False),
                             help="Config file, JSON or TOML (also from MEMSIF_CONFIG).")


def _memory_location(f: F) -> F:
    """The one way a command names its memory file: ``--db FILE``, or ``--user`` / ``--agent``
    (one file each under ``--home``, see :mod:`memsif_lite.homes`). The command receives ``db``."""

    @functools.wraps(f)
    def wrapper(*args: Any, db: str | None, user: str | None, agent: str | None, home: str | None,
                **kwargs: Any) -> Any:
        return f(*args, db=_resolve_db(db, user, agent, home), **kwargs)

    return _options(
        click.option("--db", envvar="MEMSIF_DB", default=None, type=click.Path(dir_okay=False),
                     help="Memory file (also from MEMSIF_DB); or name it with --user / --agent."),
        click.option("--user", default=None, metavar="NAME",
                     help="Use this user's memory file under --home (instead of --db)."),
        click.option("--agent", default=None, metavar="NAME",
                     help="Use this agent's memory file under --home (with --user: that user's, for this agent)."),
        click.option("--home", envvar="MEMSIF_HOME", default=None, type=click.Path(file_okay=False),
                     help="Directory of per-user/agent memory files (also MEMSIF_HOME; default: the user data "
                          "directory, e.g. ~/.local/share/memsif)."),
    )(cast(F, wrapper))


def _resolve_db(db: str | None, user: str | None, agent: str | None, home: str | None) -> str:
    ctx = click.get_current_context()
    if user is None and agent is None:
        if db is None:
            raise click.UsageError("name the memory file: --db FILE (or MEMSIF_DB), or --user NAME / --agent NAME")
        return db
    if db is not None and ctx.get_parameter_source("db") is not ParameterSource.ENVIRONMENT:
        raise click.UsageError("--db and --user/--agent both name the memory file: give one of them")
    try:
        path = memory_path(user, agent, home=home)
    except InvalidInputError as e:
        raise click.BadParameter(str(e), param_hint="'--user' / '--agent'") from None
    ctx.meta["memsif.home_file"] = True  # _open(create=True) makes its directories
    return str(path)


file_options = _options(_memory_location, config_option)
filter_options = _options(
    click.option("--speaker", "speakers", multiple=True,
                 help="Only messages by this speaker (repeatable; case-insensitive). For facts: their subject."),
    click.option("--session", "sessions", multiple=True, help="Only messages of this session (repeatable)."),
    click.option("--since", default=None, help="Only messages at or after this time (ISO 8601; a date alone: "
                                                 "its start)."),
    click.option("--until", default=None, help="Only messages at or before this time (ISO 8601; a date alone: "
                                                 "its end)."),
)


def _filters(speakers: Sequence[str], sessions: Sequence[str], since: str | None, until: str | None) -> dict[str, Any]:
    """The filter options as keyword arguments of the Python API (validated there)."""
    return {"speakers": list(speakers) or None, "sessions": list(sessions) or None, "since": since, "until": until}


llm_options = _options(
    click.option("--llm", envvar="MEMSIF_LLM", default=None,
                 help="litellm model string, e.g. openai/gpt-4o-mini or ollama/qwen3:4b (also MEMSIF_LLM; "
                      "needs the llm extra)."),
    click.option("--api-base", envvar="MEMSIF_API_BASE", default=None,
                 help="Base URL of an OpenAI-compatible server: vLLM, Ollama... (also MEMSIF_API_BASE)."),
    click.option("--api-key", envvar="MEMSIF_API_KEY", default=None,
                 help="API key for the LLM server (also MEMSIF_API_KEY)."),
)


def _open(db: str, config: str | None = None, llm: str | None = None, api_base: str | None = None,
          api_key: str | None = None, *, create: bool = False, read_only: bool = False,
          later: bool = False) -> Memory:
    """The one way the CLI opens a memory file. The embedding model is the one the file records.
    A command's queued steps run before it exits (``inline``; LLM calls outside any transaction),
    or not at all with ``later`` (``memsif process`` runs them). Without ``create`` the file must
    exist and not be empty: a command that does not create memory files never turns one into one."""
    if not create and not Path(db).exists():
        raise MemoryFileError(f"no memory file at {db} (create one with `memsif ingest FILE --db {db}`)")
    if not create and Path(db).is_file() and Path(db).stat().st_size == 0:
        raise MemoryFileError(f"{db} is empty, not a memory file (it was left as it is)")
    ctx = click.get_current_context(silent=True)
    if create and ctx is not None and ctx.meta.get("memsif.home_file"):
        make_private_dirs(Path(db).parent)
    cfg = Config.from_file(config) if config else None
    llm_kwargs = {k: v for k, v in (("api_base", api_base), ("api_key", api_key)) if v}
    return Memory(db, config=cfg, llm=llm or None, llm_kwargs=llm_kwargs or None, read_only=read_only,
                  process="manual" if later else "inline")


def _writable_parent(path: str) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise click.ClickException(f"cannot write {path}: no directory {parent}")


def _os_error(e: OSError) -> str:
    if e.filename is not None:
        return f"{e.filename}: {e.strerror or e}"
    return str(e) or type(e).__name__


def _message(e: Exception) -> str:
    """What ``Error: ...`` says for an exception a command let through (never a traceback)."""
    if isinstance(e, click.ClickException):
        return e.format_message()
    if isinstance(e, MemsifError):
        return str(e) or type(e).__name__
    if isinstance(e, OSError):
        return _os_error(e)
    if isinstance(e, UnicodeDecodeError):
        return f"the input is not UTF-8 text ({e.reason} at byte {e.start})"
    if isinstance(e, ValueError):
        return str(e) or type(e).__name__
    log.debug("unexpected error in the memsif command line", exc_info=True)
    return f"unexpected {type(e).__name__}: {e} (please report)"


def _not_utf8(value: str) -> str | None:
    """Where an argument is not UTF-8: Python hands undecodable bytes over as lone surrogates."""
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        return f"a lone surrogate U+{ord(value[e.start]):04X} at character {e.start}"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"byte 0x{raw[e.start]:02x} at offset {e.start}"
    return None


class _Command(click.Command):
    """Refuses an argument or option that is not valid UTF-8, naming it and the first bad byte
    (instead of a misleading error from deep inside)."""

    def invoke(self, ctx: click.Context) -> Any:
        for param in self.params:
            value = ctx.params.get(param.name or "")
            for v in value if isinstance(value, (tuple, list)) else (value,):
                where = _not_utf8(v) if isinstance(v, str) else None
                if where:
                    raise click.BadParameter(f"not valid UTF-8 ({where})", ctx=ctx, param=param)
        return super().invoke(ctx)


class _Group(click.Group):
    """Turns every error into ``Error: ...`` and exit 1; click's usage errors keep exit 2."""

    command_class = _Command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except OSError as e:
            if e.errno == errno.EPIPE:  # click's main() handles a closed pipe quietly
                raise
            raise click.ClickException(_message(e)) from e
        except Exception as e:
            raise click.ClickException(_message(e)) from e


@contextlib.contextmanager
def _nothing_added() -> Iterator[None]:
    """Every failure of ``add`` and ``ingest`` says the same: they add all of their input or nothing."""
    try:
        yield
    except (click.UsageError, click.exceptions.Exit, click.exceptions.Abort):
        raise
    except Exception as e:
        raise click.ClickException(f"{_message(e)} (nothing was added)") from e


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memsif_lite")
@click.option("-v", "--verbose", is_flag=True, help="Log debug details (and tracebacks) to stderr.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """memsif: long-term memory for LLM agents in one SQLite file."""
    if verbose:  # only memsif_lite's own records, not every library's; undone when the command ends
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        previous = log.level
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)

        def undo() -> None:
            log.removeHandler(handler)
            log.setLevel(previous)

        ctx.call_on_close(undo)


# -- commands --------------------------------------------------------------------------------------
def _read_messages(file: str, speaker_map: SpeakerMap) -> list[tuple[str, dict[str, Any]]]:
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


def _ingest(mem: Memory, labeled: list[tuple[str, dict[str, Any]]], *, label: str = "ingesting") -> list[int]:
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


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@file_options
@llm_options
@click.option("--speaker-map", default=None, metavar="ROLE=NAME,...",
              help="Speakers for chat lines {\"role\",\"content\"}, e.g. user=Ana,assistant=Bot "
                   "(default: the role itself).")
@click.option("--later", is_flag=True, help="Store now; build segments and facts later with `memsif process` "
                                           "(useful with a slow --llm).")
@json_option
def ingest(file: str, db: str, config: str | None, llm: str | None, api_base: str | None, api_key: str | None,
           speaker_map: str | None, later: bool, as_json: bool) -> None:
    """Add the messages of FILE (JSONL, chat JSONL or LoCoMo JSON; - for standard input) to the
    memory, creating it if needed. All or nothing: a bad line (named by its number) adds nothing.
    Idempotent: messages already in the file are skipped and counted."""
    with _nothing_added():
        smap = parse_speaker_map(speaker_map)
        labeled = _checked(_read_messages(file, smap), config)
        if smap.unused():
            _echo(f"Warning: --speaker-map names roles no line has: {', '.join(smap.unused())}", err=True)
        t0 = time.perf_counter()
        mem = _open(db, config, llm, api_base, api_key, create=True, later=later)
    with mem:
        with _nothing_added():
            ids = _ingest(mem, labeled)
        st = mem.stats()
    secs = time.perf_counter() - t0
    skipped = len(labeled) - len(ids)
    if as_json:
        _emit({"file": file, "db": db, "added": len(ids), "skipped": skipped, "message_ids": ids,
               "seconds": round(secs, 3), "stats": st})
        return
    already = f", skipped {skipped} already present" if skipped else ""
    _echo(f"added {_plural(len(ids), 'message')}{already} in {secs:.1f}s")
    _echo(_stats_line(st))


@main.command()
@click.argument("speaker")
@click.argument("text")
@file_options
@llm_options
@click.option("--at", default=None, help="When it was said (ISO 8601, with its UTC offset if known; default: now).")
@click.option("--session", default=None, help="Session (conversation) it belongs to.")
@click.option("--source-id", default=None, help="Its id in the source conversation.")
@click.option("--later", is_flag=True, help="Store now; build segments and facts later with `memsif process` "
                                           "(useful with a slow --llm).")
@json_option
def add(speaker: str, text: str, db: str, config: str | None, llm: str | None, api_base: str | None,
        api_key: str | None, at: str | None, session: str | None, source_id: str | None, later: bool,
        as_json: bool) -> None:
    """Add one message (SPEAKER said TEXT) to the memory, creating it if needed. Idempotent: a
    message already stored (as `memsif ingest` finds them) is not added again."""
    message = dict(speaker=speaker, text=text, at=at, session=session, source_id=source_id)
    with _nothing_added():
        _checked([("", message)], config)
        mem = _open(db, config, llm, api_base, api_key, create=True, later=later)
    with mem:
        with _nothing_added():
            added = mem.remember([message])[0]
        mid = added.id
        m = mem.get(mid)
    if as_json:
        _emit({"id": mid, "new": added.new, "message": m})
    else:
        _echo(f"{'added' if added.new else 'already present:'} message {mid} ({_local(m)})")


def _local(m: Any) -> str:
    """A message's time as its caller gave it: ``2024-05-06 00:30+02:00`` (``... UTC`` if unknown)."""
    if m.utc_offset_min is None:
        return f"{_dt(m.at)} UTC"
    return m.local_at.isoformat(sep=" ", timespec="minutes")


@main.command()
@file_options
@filter_options
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=0), help="At most this many.")
@click.option("--offset", default=0, type=click.IntRange(min=0), help="Skip this many first.")
@json_option
def messages(db: str, config: str | None, speakers: tuple[str, ...], sessions: tuple[str, ...], since: str | None,
             until: str | None, limit: int, offset: int, as_json: bool) -> None:
    """List stored messages in the order they were added, filtered, one page at a time."""
    with _open(db, config, read_only=True) as mem:
        page = mem.messages(**_filters(speakers, sessions, since, until), limit=limit + 1, offset=offset)
    more, page = len(page) > limit, page[:limit]
    if as_json:
        _emit({"messages": page, "offset": offset, "limit": limit, "more": more})
        return
    if not page:
        _echo("no messages match" if offset == 0 else f"no messages after the first {offset}")
    for m in page:
        session = f" (session {m.session})" if m.session is not None else ""
        _echo(f"[{m.id}] {_local(m)}{session} {m.speaker}: {_one_line(m.text)}")
    if more:
        _echo(f"… more: --offset {offset + limit}")


@main.command()
@click.argument("query")
@file_options
@click.option("-k", default=10, show_default=True, type=click.IntRange(min=1), help="Number of results.")
@click.option("--level", type=click.Choice(["message", "segment", "trajectory"]), default="message", show_default=True)
@filter_options
@json_option
def search(query: str, db: str, config: str | None, k: int, level: str, speakers: tuple[str, ...],
           sessions: tuple[str, ...], since: str | None, until: str | None, as_json: bool) -> None:
    """Hybrid (dense + BM25) search of the memory; the filters apply inside the search."""
    with _open(db, config, read_only=True) as mem:
        hits = mem.search(query, k=k, level=level, **_filters(speakers, sessions, since, until))
    if as_json:
        _emit({"query": query, "level": level, "k": k, "results": hits})
        return
    if not hits:
        _echo("no results")
    for h in hits:
        if level == "message":
            _echo(f"[{h.id}] {_dt(h.at)} {h.speaker}: {h.text}")
        else:
            _echo(f"[{h.id}] {_dt(h.at)} ({_plural(len(h.message_ids), 'message')})")
            _echo("      " + h.text.replace("\n", "\n      "))


@main.command("process")
@file_options
@llm_options
@click.option("--until-empty/--once", default=True, show_default=True,
              help="Run until the queue is empty, or only --max-steps / --max-seconds worth.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Run at most this many steps.")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop starting new steps after this long.")
@json_option
def process_cmd(db: str, config: str | None, llm: str | None, api_base: str | None, api_key: str | None,
                until_empty: bool, max_steps: int | None, max_seconds: float | None, as_json: bool) -> None:
    """Run the queued pipeline steps (segment placement, segment close, CoreFacts), with --llm if
    given; LLM calls happen with no transaction open, so other writers never wait for them."""
    if not until_empty and max_steps is None and max_seconds is None:
        max_steps = 1
    with _open(db, config, llm, api_base, api_key, later=True) as mem:
        report = mem.process(max_steps=max_steps, max_seconds=max_seconds)
        st = mem.stats()
    if as_json:
        _emit({"steps": report.steps, "pending": report.pending, "seconds": round(report.seconds, 3),
               "stale": report.stale, "stats": st})
        return
    _echo(f"ran {_plural(report.steps, 'step')} in {report.seconds:.1f}s; "
               f"{_plural(report.pending, 'step')} pending")
    _echo(_stats_line(st))


@main.command()
@file_options
@json_option
def stats(db: str, config: str | None, as_json: bool) -> None:
    """Counts of messages, structure, facts and LLM calls."""
    with _open(db, config, read_only=True) as mem:
        st = mem.stats()
    if as_json:
        _emit(st)
    else:
        _print_stats(st)


def _timeline(mem: Memory, trajectory: int | None = None, since: str | None = None,
              limit: int = 0) -> tuple[list[Any], list[Any], int]:
    """(trajectories, segments, omitted): the segments of ``trajectory`` (all without), ending at or
    after ``since``; at most ``limit`` of them (0: all) — the first from ``since`` on, else the latest."""
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
    return [t for t in trajs if shown & set(t.segment_ids)], segs, total - len(segs)


def _print_timeline(mem: Memory, *, width: int = 100, trajectory: int | None = None, since: str | None = None,
                    limit: int = 0) -> None:
    trajs, seg_list, omitted = _timeline(mem, trajectory, since, limit)
    segs = {s.id: s for s in seg_list}
    texts = {m.id: m for m in mem.messages()} if segs else {}
    if not texts:
        _echo("empty memory: no messages yet" if not mem.stats()["messages"] else "no segments match")
        return
    groups: list[tuple[str, list[Any]]] = []
    for t in trajs:
        title = (f"Trajectory {t.id}: {t.label}  ({_dt(t.start)} → {_dt(t.end)}, "
                 f"{_plural(len(t.segment_ids), 'segment')})")
        groups.append((title, [segs[s] for s in t.segment_ids if s in segs]))
    open_segs = [s for s in segs.values() if s.trajectory_id is None]
    if open_segs:
        groups.append(("Not yet linked to a trajectory", open_segs))
    for title, ss in groups:
        _echo(title, bold=True)
        for s in ss:
            _echo(f"  Segment {s.id} [{_dt(s.start)}] {s.label}")
            for mid in s.message_ids:
                m = texts.get(mid)
                if m is None:
                    continue
                line = f"{m.speaker}: {_one_line(m.text)}"
                _echo("    " + (line if len(line) <= width else line[: width - 1] + "…"))
    if omitted:
        which = "later" if since is not None else "earlier"
        _echo(f"… {_plural(omitted, 'more segment')} ({which}): --limit 0 shows all, --since DATE starts later")


@main.command()
@file_options
@click.option("--trajectory", type=int, default=None, help="Only this trajectory's segments.")
@click.option("--since", default=None, help="Only segments ending at or after this time (ISO 8601 or a date).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=0),
              help="At most this many segments (0: all): the first from --since on, else the latest.")
@json_option
def show(db: str, config: str | None, trajectory: int | None, since: str | None, limit: int, as_json: bool) -> None:
    """Print segments grouped by trajectory as a timeline."""
    with _open(db, config, read_only=True) as mem:
        if as_json:
            trajs, segs, omitted = _timeline(mem, trajectory, since, limit)
            ids = {m for s in segs for m in s.message_ids}
            _emit({"trajectories": trajs, "segments": segs, "messages": [m for m in mem.messages() if m.id in ids],
                   "omitted_segments": omitted})
        else:
            _print_timeline(mem, trajectory=trajectory, since=since, limit=limit)


@main.command()
@click.argument("question")
@file_options
@llm_options
@click.option("--budget", default=2000, show_default=True, help="Context budget in tokens.")
@filter_options
@click.option("--evidence", "show_evidence", default=5, show_default=True, type=click.IntRange(min=0),
              help="Evidence items to list (--json has all of them).")
@json_option
def ask(question: str, db: str, config: str | None, llm: str | None, api_base: str | None, api_key: str | None,
        budget: int, speakers: tuple[str, ...], sessions: tuple[str, ...], since: str | None, until: str | None,
        show_evidence: int, as_json: bool) -> None:
    """Answer QUESTION from memory, then list the facts and the best evidence with dates and ids."""
    with _open(db, config, llm, api_base, api_key) as mem:
        a = mem.ask(question, budget_tokens=budget, **_filters(speakers, sessions, since, until))
    if as_json:
        _emit({"question": question, **to_jsonable(a)})
        return
    _echo(a.text, bold=True)
    if a.extractive:
        _echo("(extractive answer: the most relevant stored sentence; configure --llm for a generated one)")
    for f in a.facts:
        old = f"  [superseded {_day(f.valid_to)}]" if f.valid_to is not None else ""
        _echo(f"  fact {f.kind}#{f.id}: {_clip(f.stmt)}{old}  ({_messages_ref(f.message_ids)})")
    for e in a.evidence[:show_evidence]:
        _echo(f"  [{_day(e.local_at)}] #{_ids(e.message_ids)} {e.speaker}: {_clip(e.stmt)}")
    if len(a.evidence) > show_evidence:
        _echo(f"  … {_plural(len(a.evidence) - show_evidence, 'more evidence item')} (--evidence N or --json)")


def _clip(text: str, width: int = 110) -> str:
    line = _one_line(text)
    return line if len(line) <= width else line[: width - 1] + "…"


@main.command()
@click.argument("question")
@file_options
@click.option("--budget", default=2000, show_default=True, help="Context budget in tokens.")
@filter_options
@json_option
def context(question: str, db: str, config: str | None, budget: int, speakers: tuple[str, ...],
            sessions: tuple[str, ...], since: str | None, until: str | None, as_json: bool) -> None:
    """Print a ready-to-paste memory context for QUESTION (no LLM call, nothing written)."""
    with _open(db, config, read_only=True) as mem:
        c = mem.context(question, budget_tokens=budget, **_filters(speakers, sessions, since, until))
    if as_json:
        _emit({**to_jsonable(c), "message_ids": c.message_ids})
    else:
        _echo(c.text)


@main.command()
@file_options
@click.option("--subject", default=None, help="Only facts about this subject (case-insensitive).")
@click.option("--type", "ftype", default=None, help="Only facts of this type.")
@click.option("--all", "include_superseded", is_flag=True, help="Include superseded facts.")
@click.option("--active", is_flag=True, help="List promoted ActiveFacts instead.")
@filter_options
@json_option
def facts(db: str, config: str | None, subject: str | None, ftype: str | None, include_superseded: bool,
          active: bool, speakers: tuple[str, ...], sessions: tuple[str, ...], since: str | None, until: str | None,
          as_json: bool) -> None:
    """List CoreFacts as a table, or ActiveFacts with --active. Filters: --speaker is the subject;
    --session/--since/--until select facts with a source message there."""
    flt = _filters(speakers, sessions, since, until)
    if active and any(flt.values()):
        raise click.UsageError("--speaker/--session/--since/--until filter CoreFacts, not --active")
    if active:
        with _open(db, config, read_only=True) as mem:
            actives = mem.active_facts()
        if as_json:
            _emit({"active_facts": actives})
        elif not actives:
            _echo("no ActiveFacts yet (they are promoted from the evidence of questions asked with `memsif ask`)")
        else:
            _table(["id", "subject", "messages", "statement"],
                   [(a.id, a.subject, _ids(a.message_ids), _one_line(a.stmt)) for a in actives], right=[0])
        return
    with _open(db, config, read_only=True) as mem:
        core = mem.facts(subject=subject, type=ftype, include_superseded=include_superseded, **flt)
    if as_json:
        _emit({"facts": core})
    elif not core:
        filtered = subject is not None or ftype is not None or any(flt.values())
        _echo("no CoreFacts match" if filtered else "no CoreFacts yet")
    else:
        headers = ["id", "type", "subject", "since"] + (["until"] if include_superseded else []) + ["statement"]
        rows = [[f.id, f.type, f.subject, _day(f.valid_from)] + ([_day(f.valid_to)] if include_superseded else [])
                + [_one_line(f.stmt)] for f in core]
        _table(headers, rows, right=[0])


@main.command()
@file_options
@click.option("--message", "message_id", type=int, default=None, help="Message id to forget.")
@click.option("--fact", "fact_id", type=int, default=None, help="CoreFact id to forget.")
@click.option("--source-id", default=None, help="Forget the messages with this source id (see --speaker).")
@click.option("--speaker", default=None, help="With --source-id: only this speaker's message.")
@json_option
def forget(db: str, config: str | None, message_id: int | None, fact_id: int | None, source_id: str | None,
           speaker: str | None, as_json: bool) -> None:
    """Delete a message (and everything derived only from it), a fact, or the messages with a source id."""
    if sum(x is not None for x in (message_id, fact_id, source_id)) != 1:
        raise click.UsageError("give exactly one of --message ID, --fact ID or --source-id ID")
    if speaker is not None and source_id is None:
        raise click.UsageError("--speaker goes with --source-id")
    kind = "fact" if fact_id is not None else "message"
    with _open(db, config) as mem:
        ids = mem.forget(message_id=message_id, fact_id=fact_id, source_id=source_id, speaker=speaker)
    if as_json:
        _emit({"forgot": kind, "id": ids[0]} if source_id is None else {"forgot": kind, "ids": ids})
    else:
        _echo(f"forgot {kind} {ids[0]}" if len(ids) == 1 else f"forgot {kind}s {', '.join(map(str, ids))}")


@main.command()
@click.argument("other", type=click.Path(dir_okay=False))
@file_options
@click.option("--dry-run", is_flag=True, help="Report what the merge would do, writing nothing.")
@click.option("--later", is_flag=True,
              help="Only queue the structure rebuild (run it with `memsif process`, e.g. with --llm).")
@json_option
def merge(other: str, db: str, config: str | None, dry_run: bool, later: bool, as_json: bool) -> None:
    """Bring into --db what OTHER (another copy of the same memory) has: new messages (re-embedded
    if OTHER used another model), forgotten ones removed, structure and facts rebuilt. OTHER is
    only read."""
    if not Path(other).exists():
        raise click.ClickException(f"no memory file at {other}")
    with _open(db, config, later=later, read_only=dry_run) as mem:
        report = mem.merge_from(other, dry_run=dry_run)
        st = mem.stats()
    if as_json:
        _emit({**report.to_dict(), "db": db, "stats": st})
        return
    verb = "would add" if dry_run else "added"
    _echo(f"{verb} {_plural(report.added, 'message')} from {other} "
               f"({report.skipped_present} already here, {report.skipped_forgotten} forgotten on one side); "
               f"{'would remove' if dry_run else 'removed'} {report.removed_by_tombstones} forgotten there"
               + (f"; {report.re_embedded} re-embedded with this file's model" if report.re_embedded else ""))
    if report.rebuilt_from:
        _echo(f"structure {'to rebuild' if dry_run else 'rebuilt'} from {report.rebuilt_from}"
                   + (f" ({_plural(report.replayed, 'message')} placed again)" if report.replayed else ""))
    for line in report.facts_added:
        _echo(f"  + fact {line}")
    for line in report.facts_superseded:
        _echo(f"  ~ superseded {line}")
    for line in report.facts_removed:
        _echo(f"  - fact {line}")
    if report.pending_steps:
        _echo(f"{_plural(report.pending_steps, 'step')} pending (run `memsif process --db {db}`)")
    _echo(_stats_line(st))


@main.command("export")
@file_options
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="JSON-lines file to write (a new one).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@json_option
def export_cmd(db: str, config: str | None, out: str, force: bool, as_json: bool) -> None:
    """Export everything to JSON lines (import it with `memsif import`), readable by its owner only."""
    _writable_parent(out)
    with _open(db, config, read_only=True) as mem:
        n = mem.export_to(out, overwrite=force)
    if as_json:
        _emit({"db": db, "out": out, "lines": n})
    else:
        _echo(f"wrote {_plural(n, 'line')} to {out}")


@main.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@file_options
@json_option
def import_cmd(file: str, db: str, config: str | None, as_json: bool) -> None:
    """Load an export (from `memsif export`) into a fresh memory file, creating it if needed."""
    try:
        with _built_aside(db) as path, _open(path, config, create=True) as mem:
            counts = mem.import_from(file)
            st = mem.stats()
    except UnicodeDecodeError as e:
        raise click.ClickException(f"cannot read {file}: not UTF-8 text ({e.reason} at byte {e.start}); "
                                   "expected an export written by `memsif export`") from None
    if as_json:
        _emit({"file": file, "db": db, "imported": counts, "stats": st})
    else:
        _echo(f"imported {_plural(counts.get('messages', 0), 'message')}; {_stats_line(st)}")


@contextlib.contextmanager
def _built_aside(db: str) -> Iterator[str]:
    """Where to build ``db``: itself if it exists; else a new file of a random name beside it,
    linked into place once the block succeeded. So a failed import leaves no file behind, and
    nothing this command did not create is ever removed (not a file another process made there
    meanwhile: then the import fails and that file stays as it is)."""
    if Path(db).exists():
        yield db
        return
    if click.get_current_context().meta.get("memsif.home_file"):
        make_private_dirs(Path(db).parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{Path(db).name}.", suffix=".new", dir=Path(db).parent)
    os.close(fd)  # an empty file, which Memory makes a memory file
    try:
        yield tmp
        try:
            os.link(tmp, db)
        except OSError:
            if os.path.lexists(db):
                raise MemoryFileError(f"{db} appeared while importing; it was left as it is") from None
            os.replace(tmp, db)  # a file system without hard links
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(tmp + suffix).unlink(missing_ok=True)


@main.command()
@click.argument("dest", type=click.Path(dir_okay=False))
@file_options
@json_option
def backup(dest: str, db: str, config: str | None, as_json: bool) -> None:
    """Write a consistent copy of the memory file to DEST (safe while others write)."""
    _writable_parent(dest)
    with _open(db, config, read_only=True) as mem:
        mem.backup(dest)
    if as_json:
        _emit({"db": db, "dest": dest, "bytes": Path(dest).stat().st_size})
    else:
        _echo(f"backed up to {dest}")


@main.command()
@file_options
@json_option
def check(db: str, config: str | None, as_json: bool) -> None:
    """Check a memory file: what it is, integrity, schema, indexes and vectors (exit 1 on problems)."""
    st: dict[str, int] = {}
    if not Path(db).exists():
        problems = [f"no such file: {db}"]
    else:
        try:
            with _open(db, config, read_only=True) as mem:
                problems = list(mem.check())
                st = mem.stats()
        except MemsifError as e:
            problems = [str(e)]
    if as_json:
        _emit({"ok": not problems, "problems": problems, "stats": st})
    elif problems:
        _echo("NOT OK:")
        for p in problems:
            _echo(f"  - {p}")
    else:
        _echo(f"OK: a memsif memory file (schema, integrity, full-text index and vectors check out); "
                   f"{_plural(st['messages'], 'message')}, {_plural(st['segments'], 'segment')}, "
                   f"{_plural(st['core_facts'], 'fact')}")
    if problems:
        sys.exit(1)


@main.command("mcp")
@file_options
@llm_options
@click.option("--allow-forget", is_flag=True,
              help="Offer the forget tool (off by default: a model can be steered by what it reads).")
@click.option("--read-only", is_flag=True,
              help="Open the file read-only and offer the reading tools only (search, context, facts, stats).")
def mcp_cmd(db: str, config: str | None, llm: str | None, api_base: str | None, api_key: str | None,
            allow_forget: bool, read_only: bool) -> None:
    """Serve the memory to an MCP client (Claude Desktop, Cursor, VS Code...) over stdio.

    Tools: remember, search, context, ask, facts, stats, and forget with --allow-forget. The file
    is created if needed (not with --read-only). Needs the mcp extra: pip install 'memsif_lite[mcp]'.
    """
    if read_only and allow_forget:
        raise click.UsageError("--read-only and --allow-forget contradict each other")
    from memsif_lite import mcp_server  # the MCP SDK is imported only by this command

    mem = _open(db, config, llm, api_base, api_key, create=not read_only, read_only=read_only)
    mcp_server.serve(mem, allow_forget=allow_forget)


@main.command()
@click.option("--db", envvar="MEMSIF_DB", default=None, type=click.Path(dir_okay=False),
              help="Where to write the demo memory (default: a temporary file, deleted afterwards).")
@config_option
def demo(db: str | None, config: str | None) -> None:
    """Build a memory from a bundled sample conversation and take a short tour."""
    sample = resources.files("memsif_lite.data").joinpath("sample_conversation.jsonl")
    with resources.as_file(sample) as p:
        items = [(f"{p.name}:{i}", m) for i, m in enumerate(read_jsonl(p), start=1)]
    with tempfile.TemporaryDirectory(prefix="memsif-demo-") as tmp:
        where = f"Memory file {db}" if db is not None else "A temporary memory file"
        path = db if db is not None else str(Path(tmp) / "demo.db")
        t0 = time.perf_counter()
        with _open(path, config, create=True) as mem:
            _ingest(mem, items, label="building the demo memory")  # a second run adds nothing
            _tour(mem, f"{where}: built in {time.perf_counter() - t0:.1f}s, offline (no LLM configured)")
    if db is not None:
        _echo(f"\nDone. The demo memory stays in {db}: try memsif search --db {db} \"where does Maya live?\"")
    else:
        _echo("\nDone. Try: memsif ingest FILE --db my.db && memsif search --db my.db \"...\"")


def _tour(mem: Memory, title: str) -> None:
    _echo(f"\n{title}", bold=True)
    _print_stats(mem.stats(), indent="  ")
    _echo("\nStructure: Topical Segments grouped into Event Trajectories", bold=True)
    _print_timeline(mem, width=90)
    for q in ("Which company did Maya join?", "Where does Maya live now?"):
        _echo(f"\nsearch: {q}", bold=True)
        for h in mem.search(q, k=3):
            _echo(f"  [{h.id}] {_dt(h.at)} {h.speaker}: {h.text}")
    q = "What did Leo do with his running shoes?"
    _echo(f"\nsearch by segment: {q}", bold=True)
    for h in mem.search(q, k=1, level="segment"):
        _echo("  " + h.text.replace("\n", "\n  "))
    core = mem.facts(include_superseded=True)
    if core:
        _echo("\nCoreFacts extracted offline (with history)", bold=True)
        for f in core[:14]:
            until = f"  [superseded {_day(f.valid_to)}]" if f.valid_to else ""
            _echo(f"  {f.type:10} {f.stmt}{until}")
    for q in ("Who is Maya's manager?", "What is the name of Leo's dog?"):
        a = mem.ask(q, budget_tokens=400)
        _echo(f"\nask: {q}", bold=True)
        _echo(f"  {a.text}\n  (extractive answer, offline; {a.tokens_in} context tokens; best evidence:)")
        for e in a.evidence[:3]:
            _echo(f"    [{_day(e.at)}] #{_ids(e.message_ids)} {e.speaker}: {e.stmt[:100]}")


if __name__ == "__main__":  # pragma: no cover
    main()
