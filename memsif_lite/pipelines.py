"""Wiring: the rooms of the paper put together for one open file (what ``Memory`` delegates to).

Judges and rules follow one pattern: a protocol, an offline rule, and — when an LLM is
configured — an LLM rule that falls back to the offline one. Injected judges replace the
offline rules (and are still wrapped by the LLM rule when an LLM is configured).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import apsw
import numpy as np
import sqlite_vec

from . import store
from .active_facts import ActiveFactStore
from .config import Config
from .core_facts import (CoreFactWriter, FactExtractor, LLMFactExtractor, LLMOperationChooser, OfflineFactExtractor,
                         OfflineOperationChooser, OperationChooser)
from .db import Database
from .embed import Embedder, Embeddings, query_levels, recorded_embedder, resolve_embedder
from .errors import InvalidInputError, MemoryFileError, MemsifError
from .ingest import IngestPipeline
from .keys import Key
from .llm import LLM, CallRecord, ModelHealth
from .query import QueryPipeline
from .retrieval import Retriever
from .segments import BoundaryJudge, LLMBoundaryJudge, OfflineBoundaryJudge, SegmentBuilder
from .store import FileInfo, check_embedding, connect, map_errors
from .timeutil import now_stored
from .trajectories import LLMTrajectoryJudge, OfflineTrajectoryJudge, TrajectoryBuilder, TrajectoryJudge
from .version import __version__
from .background import Background
from .modes import Mode
from .worker import Worker

__all__ = ["Pipelines", "Setup", "build", "make_llm", "choose_mode", "check_meta", "embedder_for", "initial_meta",
           "open_database", "reopen", "wire", "loading_beside"]


@dataclass(frozen=True)
class Pipelines:
    embeddings: Embeddings
    ingest: IngestPipeline
    worker: Worker
    retriever: Retriever
    active_facts: ActiveFactStore
    query: QueryPipeline


def build(db: Database, cfg: Config, emb: Embedder, llm: LLM | None, *, boundary_judge: BoundaryJudge | None = None,
          trajectory_judge: TrajectoryJudge | None = None) -> Pipelines:
    if cfg.sem_low is not None and cfg.sem_high is not None:
        levels = (float(cfg.sem_low), float(cfg.sem_high))
    else:
        levels = (float(emb.sem_levels[0]), float(emb.sem_levels[1]))
    embeddings = Embeddings(emb, db.messages.vector_by_hash)
    boundary: BoundaryJudge = boundary_judge or OfflineBoundaryJudge(cfg.tau_split, cfg.tau_merge)
    trajectory: TrajectoryJudge = trajectory_judge or OfflineTrajectoryJudge(cfg.trajectory_threshold)
    extractor: FactExtractor = OfflineFactExtractor(cfg.fact_schema)
    chooser: OperationChooser = OfflineOperationChooser()
    if llm is not None:
        boundary = LLMBoundaryJudge(llm, boundary)
        trajectory = LLMTrajectoryJudge(llm, trajectory)
        extractor = LLMFactExtractor(llm, cfg.fact_schema, extractor)
        chooser = LLMOperationChooser(llm, chooser)
    worker = Worker(
        db, llm=llm,
        segments=SegmentBuilder(db, alpha=cfg.alpha_segment, tau_merge=cfg.tau_merge, tau_split=cfg.tau_split,
                                levels=levels, judge=boundary, gap_s=cfg.segment_gap_s, burst_s=cfg.burst_s),
        trajectories=TrajectoryBuilder(db, alpha=cfg.alpha_trajectory, top_k=cfg.top_k, levels=levels,
                                       judge=trajectory),
        core_facts=CoreFactWriter(db, extractor=extractor, chooser=chooser, embed_passages=embeddings.passages))
    ingest = IngestPipeline(db, embeddings=embeddings, worker=worker, max_chars=cfg.max_message_chars)
    active = ActiveFactStore(db, levels=levels, query_levels=query_levels(emb, levels), theta_s=cfg.theta_s,
                             theta_q=cfg.theta_q, embed_passages=embeddings.passages_reused)
    embed_query = loading_beside(embeddings.query, db)
    retriever = Retriever(db, embed_query, segment_weight=cfg.segment_weight,
                          trajectory_weight=cfg.trajectory_weight)
    query = QueryPipeline(db, retriever=retriever, embed_query=embed_query,
                          embed_passages=embeddings.passages_reused, llm=llm, active_facts=active)
    return Pipelines(embeddings, ingest, worker, retriever, active, query)


def loading_beside(embed_query: Callable[[str], np.ndarray], db: Database) -> Callable[[str], np.ndarray]:
    """``embed_query``, except at the first query after opening, while the message vectors are not
    loaded yet (at a million messages that load takes ~0.5 s, and the bundled model's own first
    load 0.5–0.7 s): the question is then embedded by a helper thread while this one loads them, so
    the first query waits for about the slower of the two rather than their sum (the load spends
    most of its time outside the GIL, in SQLite and numpy). The vector and the cache are the same
    as one after the other. The embedder's error is raised here once both have ended; an error of
    the load, or a Ctrl-C, at once, and the next query then waits for the helper to leave the
    embedder before it embeds (the embedder is thread-safe — the background worker calls it from
    its own thread too —, but the query vectors' little cache is not shared). Whatever embeds the
    first question loads them, also a call that then does not search them (``accumulate``, a
    filtered search vec0 answers): they are held for the next query."""
    pending: list[threading.Event] = []  # helpers left embedding by a Ctrl-C

    def embed(question: str) -> np.ndarray:
        while pending:
            pending[0].wait()
            pending.pop(0)
        if db.messages.cache_loaded:
            return embed_query(question)
        done: dict[str, Any] = {}
        ended = threading.Event()

        def helper() -> None:
            try:
                done["vector"] = embed_query(question)
            except BaseException as e:  # raised in the caller's thread, below
                done["error"] = e
            finally:
                ended.set()

        try:
            threading.Thread(target=helper, name="memsif-embed", daemon=True).start()
        except RuntimeError:  # no thread to be had: one after the other
            return embed_query(question)
        try:
            db.messages.load_cache()
            ended.wait()
        except BaseException:  # the load failed, or a Ctrl-C: raised now, the helper waited for later
            pending.append(ended)
            raise
        if "error" in done:
            raise done["error"]
        return done["vector"]
    return embed


def embedder_for(cfg: Config, info: FileInfo | None) -> Embedder:
    """The configured model (the caller's choice: any model), else the model the file records
    (with its recorded levels) when it is bundled or of a prefix the caller registered (a file
    never chooses an API or a path: :func:`memsif_lite.embed.recorded_embedder`), else the
    bundled one."""
    if cfg.embedding_model is not None or info is None or "embedding_model" not in info.meta:
        return resolve_embedder(cfg.embedding_model)
    levels = None
    try:
        raw = json.loads(info.meta.get("sem_levels", "null"))
        levels = (float(raw[0]), float(raw[1])) if raw else None
    except (ValueError, TypeError, IndexError):
        levels = None
    return recorded_embedder(str(info.meta["embedding_model"]), sem_levels=levels)


def initial_meta(emb: Embedder) -> dict[str, str]:
    """What a new file records about itself, written with its schema."""
    return {"embedding_model": emb.model_id, "embedding_dim": str(emb.dim), "embedding_metric": emb.metric,
            "sem_levels": json.dumps(list(emb.sem_levels)), "created_at": now_stored(),
            "created_by": f"memsif_lite {__version__}", "sqlite_version": apsw.sqlite_lib_version(),
            "sqlite_vec_version": getattr(sqlite_vec, "__version__", "")}


def make_llm(db: Database, model: str | None, kwargs: Mapping[str, Any] | None, cfg: Config,
             health: ModelHealth | None = None, *, record_calls: bool = True) -> LLM | None:
    """The configured LLM on one connection: it records every call in the file's ``llm_calls``
    table (unless ``record_calls`` is false: a read-only file) and refuses to be called while
    that connection has a transaction open."""
    if model is None:
        return None

    def record(r: CallRecord) -> None:
        with map_errors():
            db.admin.record_llm_call(at=r.at or now_stored(), purpose=r.purpose, model=r.model,
                                     prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
                                     latency_ms=r.latency_ms, ok=r.ok, error=r.error)

    return LLM(model, timeout=cfg.llm_timeout_s, retries=cfg.llm_retries, kwargs=kwargs,
               record=record if record_calls else None, in_transaction=lambda: db.in_transaction, health=health,
               concurrency=cfg.llm_concurrency)


@dataclass(frozen=True)
class Setup:
    """Everything needed to open the same memory again on another connection."""

    path: Path
    cfg: Config
    emb: Embedder
    llm: str | None
    llm_kwargs: Mapping[str, Any] | None
    boundary_judge: BoundaryJudge | None
    trajectory_judge: TrajectoryJudge | None
    #: the file's encryption key (None: not encrypted), for the background worker's connection
    #: and a read-only memory's reopening; wiped when the memory closes
    key: Key | None = None


def choose_mode(s: Setup, mode: str | None, p: Pipelines, health: ModelHealth) -> Mode:
    """When queued steps run (default: inline offline, background with an LLM)."""
    mode = mode or ("inline" if s.llm is None else "background")
    if mode not in Mode.MODES:
        raise InvalidInputError(f"process must be one of {', '.join(Mode.MODES)}")

    def open_worker() -> tuple[Worker, Callable[[], None]]:
        con = connect(s.path, dim=s.emb.dim, synchronous=s.cfg.synchronous, busy_timeout_ms=s.cfg.busy_timeout_ms,
                      key=s.key)
        db = Database(con)
        bp = build(db, s.cfg, s.emb, make_llm(db, s.llm, s.llm_kwargs, s.cfg, health),
                   boundary_judge=s.boundary_judge, trajectory_judge=s.trajectory_judge)
        return bp.worker, db.close

    bg = Background(open_worker, health=health if s.llm else None) if mode == "background" else None
    return Mode(mode, p.worker, offline=s.llm is None, background=bg)


def wire(db: Database, s: Setup, health: ModelHealth, mode: str | None, read_only: bool) -> tuple[Pipelines, Mode]:
    """The pipelines and the mode of one open file, over its connection ``db`` (a read-only
    file's LLM calls are not recorded in it)."""
    llm = make_llm(db, s.llm, s.llm_kwargs, s.cfg, health, record_calls=not read_only)
    p = build(db, s.cfg, s.emb, llm, boundary_judge=s.boundary_judge, trajectory_judge=s.trajectory_judge)
    return p, choose_mode(s, mode, p, health)


def check_meta(db: Database, emb: Embedder, cfg: Config, path: Path, *, write: bool = True) -> None:
    """The file's recorded model must be ``emb``; the CoreFact schema in use is recorded (a
    file describes itself) unless ``write`` is false."""
    meta = db.admin.meta()
    check_embedding(meta, emb.model_id, emb.dim, emb.metric, path)
    schema = json.dumps([{"name": t.name, "description": t.description} for t in cfg.fact_schema])
    if write and meta.get("fact_schema") != schema:
        with db.write():
            db.admin.set_meta(fact_schema=schema)


def open_database(path: Path, cfg: Config, embedder: Embedder | None, *, read_only: bool,
                  key: Key | None = None) -> tuple[Database, Embedder, store.QuietReads]:
    """Inspect the file (refusing foreign, newer or hostile files, and a wrong or missing key,
    before anything else), pick the embedder, connect and check the meta. ``read_only`` opens an
    existing file only, without writing to it, nor beside it while no one else has it open (the
    returned :class:`~memsif_lite.store.QuietReads`; never quiet for a writer). ``key``: the file
    is encrypted with it (a new file is created encrypted)."""
    if key is not None:
        store.require_cipher()
    quiet = store.QuietReads.now(path) if read_only else store.QuietReads(path, None)
    info = store.inspect(path, key=key)
    if read_only and info is None:
        raise MemoryFileError(f"no memory file at {path} (opening read-only never creates one)")
    emb = embedder or embedder_for(cfg, info)
    if info is not None:  # a file made with another model is refused before it is opened for writing
        check_embedding(info.meta, emb.model_id, emb.dim, emb.metric, path)
    try:
        db = _connect_checked(path, cfg, emb, read_only=read_only, immutable=quiet.immutable, key=key)
    except MemsifError:
        if not quiet.immutable or quiet.still_quiet():
            raise
        # an immutable open can meet a page a writer that came meanwhile was rewriting: the
        # shared way instead (as QuietReads.read does for a read)
        quiet = store.QuietReads(path, None)
        db = _connect_checked(path, cfg, emb, read_only=read_only, immutable=False, key=key)
    return db, emb, quiet


def _connect_checked(path: Path, cfg: Config, emb: Embedder, *, read_only: bool, immutable: bool,
                     key: Key | None) -> Database:
    db = reopen(path, cfg, emb, read_only=read_only, immutable=immutable, key=key)
    try:
        with map_errors():
            check_meta(db, emb, cfg, path, write=not read_only)
    except BaseException:
        db.close()
        raise
    return db


def reopen(path: Path, cfg: Config, emb: Embedder, *, read_only: bool, immutable: bool = False,
           key: Key | None = None) -> Database:
    """A connection to an inspected file (:func:`open_database`), e.g. a read-only one again the
    shared way once another process opened the file (:class:`~memsif_lite.store.QuietReads`)."""
    return Database(store.connect(path, dim=emb.dim, synchronous=cfg.synchronous,
                                  busy_timeout_ms=cfg.busy_timeout_ms, readonly=read_only, immutable=immutable,
                                  initial_meta=initial_meta(emb), key=key))
