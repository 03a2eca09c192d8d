"""The options commands share and the one way the command line opens a memory file."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from click.core import ParameterSource

from memsif_lite import Config, Memory
from memsif_lite.errors import EncryptedFileError, InvalidInputError, MemoryFileError
from memsif_lite.homes import make_private_dirs, memory_path

from .keys import KEY, asked_key, given_key, key_options

__all__ = ["config_option", "file_options", "filter_options", "key_file_options", "llm_options", "open_memory",
           "writable_parent"]

F = TypeVar("F", bound=Callable[..., Any])


def _options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


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
    ctx.meta["memsif.home_file"] = True  # open_memory(create=True) makes its directories
    return str(path)


file_options = _options(_memory_location, config_option, key_options(KEY))
#: the memory file and its key, for the commands that convert a file (``encrypt``, ``decrypt``, ``rekey``)
key_file_options = _options(_memory_location, key_options(KEY))


def filter_options(f: F) -> F:
    """``--speaker``, ``--session``, ``--since``, ``--until``, ``--as-of`` and ``--known-at``; the command
    receives them as ``filters``, the keyword arguments of the Python API (validated there)."""

    @functools.wraps(f)
    def wrapper(*args: Any, speakers: tuple[str, ...], sessions: tuple[str, ...], since: str | None,
                until: str | None, as_of: str | None, known_at: str | None, **kwargs: Any) -> Any:
        filters = {"speakers": list(speakers) or None, "sessions": list(sessions) or None, "since": since,
                   "until": until, "as_of": as_of, "known_at": known_at}
        return f(*args, filters=filters, **kwargs)

    return _options(
        click.option("--speaker", "speakers", multiple=True,
                     help="Only messages by this speaker (repeatable; case-insensitive). For facts: their subject."),
        click.option("--session", "sessions", multiple=True, help="Only messages of this session (repeatable)."),
        click.option("--since", default=None, help="Only messages at or after this time (ISO 8601; a date alone: "
                                                     "its start)."),
        click.option("--until", default=None, help="Only messages at or before this time (ISO 8601; a date alone: "
                                                     "its end)."),
        click.option("--as-of", "as_of", default=None,
                     help="As memory stood at this time (valid time): messages said by then, facts valid then "
                          "(ISO 8601; a date alone: its end)."),
        click.option("--known-at", "known_at", default=None,
                     help="As this file held memory at this time (record time: when memsif learnt it): messages "
                          "learnt by then, facts as they were then (ISO 8601; a date alone: its end)."),
    )(cast(F, wrapper))


llm_options = _options(
    click.option("--llm", envvar="MEMSIF_LLM", default=None,
                 help="litellm model string, e.g. openai/gpt-4o-mini or ollama/qwen3:4b (also MEMSIF_LLM; "
                      "needs the llm extra)."),
    click.option("--api-base", envvar="MEMSIF_API_BASE", default=None,
                 help="Base URL of an OpenAI-compatible server: vLLM, Ollama... (also MEMSIF_API_BASE)."),
    click.option("--api-key", envvar="MEMSIF_API_KEY", default=None,
                 help="API key for the LLM server (also MEMSIF_API_KEY)."),
)


def open_memory(db: str, config: str | None = None, llm: str | None = None, api_base: str | None = None,
          api_key: str | None = None, *, create: bool = False, read_only: bool = False,
          later: bool = False, prompt: bool = True) -> Memory:
    """The one way the CLI opens a memory file. The embedding model is the one the file records.
    A command's queued steps run before it exits (``inline``; LLM calls outside any transaction),
    or not at all with ``later`` (``memsif process`` runs them). Without ``create`` the file must
    exist and not be empty: a command that does not create memory files never turns one into one.
    An encrypted file is opened with the key given (:mod:`.keys`); with none, the key is asked for
    on a terminal unless ``prompt`` is false (``mcp``: its stdin is the client's)."""
    if not create and not Path(db).exists():
        raise MemoryFileError(f"no memory file at {db} (create one with `memsif ingest FILE --db {db}`)")
    if not create and Path(db).is_file() and Path(db).stat().st_size == 0:
        raise MemoryFileError(f"{db} is empty, not a memory file (it was left as it is)")
    ctx = click.get_current_context(silent=True)
    if create and ctx is not None and ctx.meta.get("memsif.home_file"):
        make_private_dirs(Path(db).parent)
    cfg = Config.from_file(config) if config else None
    llm_kwargs = {k: v for k, v in (("api_base", api_base), ("api_key", api_key)) if v}

    def opened(key: Any) -> Memory:
        return Memory(db, config=cfg, llm=llm or None, llm_kwargs=llm_kwargs or None, read_only=read_only,
                      process="manual" if later else "inline", key=key)

    try:
        return opened(given_key(KEY))
    except EncryptedFileError as e:
        if e.key_given:
            raise
        asked = asked_key(KEY, db) if prompt else None
        if asked is None:
            raise click.ClickException(f"{e} ({KEY.hint()})") from None
        return opened(asked)


def writable_parent(path: str) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise click.ClickException(f"cannot write {path}: no directory {parent}")


