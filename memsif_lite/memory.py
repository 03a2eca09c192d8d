"""The facade: ``Memory(path)`` over one SQLite file."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from . import __version__ as _version
from . import prompts, store
from .config import Config
from .embed import Embedder, load_embedder, validate_vectors
from .entities import extract_entities
from .errors import InvalidInputError, MemoryFileError, NotFoundError
from .llm import LLM, CallRecord
from .retrieval import Retriever
from .segments import LLMBoundaryJudge, OfflineBoundaryJudge, SegmentBuilder
from .timeutil import from_stored, now_stored, to_stored
from .trajectories import LLMTrajectoryJudge, OfflineTrajectoryJudge, TrajectoryBuilder
from .types import ActiveFact, CandidateCluster, CoreFact, FactEvent, Message, SearchResult, Segment, Trajectory
from .active_facts import ActiveFactStore, Evidence
from .answer import Answer, Context, answer_question, build_context
from .core_facts import CoreFactWriter
from .forgetting import forget_fact, forget_message

__all__ = ["Memory"]

log = logging.getLogger("memsif_lite")
_MAX_SPEAKER = 200
_MAX_SESSION = 200


class Memory:
    """Long-term memory in one SQLite file.

    >>> with Memory("me.db") as mem:                       # doctest: +SKIP
    ...     mem.add("Ana", "I moved to Lisbon in May.", at="2024-05-02T10:00:00")
    ...     mem.search("where does Ana live?")

    ``llm`` is a litellm model string (``"openai/gpt-4o-mini"``, ``"ollama/qwen3:4b"``,
    ``"hosted_vllm/Qwen/Qwen3-4B"``); ``llm_kwargs`` go to every call (``api_base``, ``api_key``).
    Without ``llm`` every step uses its deterministic offline fallback. ``embedder`` replaces the
    bundled ONNX model (any object with the :class:`~memsif_lite.embed.Embedder` protocol).
    """

    def __init__(self, path: str | Path, *, config: Config | None = None, llm: str | None = None,
                 llm_kwargs: Mapping[str, Any] | None = None, embedder: Embedder | None = None):
        if config is not None and not isinstance(config, Config):
            raise InvalidInputError("config must be a memsif_lite.Config")
        if llm is not None and (not isinstance(llm, str) or not llm.strip()):
            raise InvalidInputError("llm must be a litellm model string such as 'openai/gpt-4o-mini'")
        self.path = Path(path)
        self.config = config or Config()
        self._lock = threading.RLock()
        info = store.inspect(self.path)  # refuses foreign/newer/hostile files before anything else
        self.embedder: Embedder = embedder or load_embedder(self.config.embedding_model)
        if info is not None:
            store.check_embedding(info.meta, self.embedder.model_id, self.embedder.dim, self.embedder.metric, self.path)
        self.con = store._connect(self.path, dim=self.embedder.dim, synchronous=self.config.synchronous,
                                  busy_timeout_ms=self.config.busy_timeout_ms)
        try:
            self._init_meta()
        except BaseException:
            self.con.close()
            raise
        if self.config.sem_low is not None:
            self.levels = (float(self.config.sem_low), float(self.config.sem_high))  # type: ignore[arg-type]
        else:
            self.levels = tuple(self.embedder.sem_levels)  # type: ignore[assignment]
        self.llm: LLM | None = None
        self._llm_calls_made = 0
        if llm is not None:
            self.llm = LLM(llm, timeout=self.config.llm_timeout_s, retries=self.config.llm_retries,
                           kwargs=llm_kwargs, record=self._record_llm_call)
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        cfg = self.config
        boundary = OfflineBoundaryJudge(cfg.tau_split, cfg.tau_merge)
        traj_judge = OfflineTrajectoryJudge(cfg.trajectory_threshold)
        self.segment_builder = SegmentBuilder(
            self.con, alpha=cfg.alpha_segment, tau_merge=cfg.tau_merge, tau_split=cfg.tau_split, levels=self.levels,
            judge=LLMBoundaryJudge(self.llm, boundary) if self.llm else boundary, on_close=self._segment_closed)
        self.trajectory_builder = TrajectoryBuilder(
            self.con, alpha=cfg.alpha_trajectory, top_k=cfg.top_k, levels=self.levels,
            judge=LLMTrajectoryJudge(self.llm, traj_judge) if self.llm else traj_judge,
            lines=self.segment_builder.lines)
        self.retriever = Retriever(self.con, self.embed_query)
        self._record_schema()
        self.core_facts = CoreFactWriter(self.con, schema=self.config.fact_schema, embed_passages=self._embed_texts,
                                         llm=self.llm)
        self.active_facts_store = ActiveFactStore(self.con, levels=self.levels, theta_s=cfg.theta_s,
                                                  theta_q=cfg.theta_q, embed_passages=self._embed_texts,
                                                  query_levels=getattr(self.embedder, "query_levels", None))
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file. Further calls raise MemoryFileError."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self.con.close()

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryFileError("this Memory is closed")

    def _init_meta(self) -> None:
        meta = store.read_meta(self.con)
        if "embedding_model" in meta:
            store.check_embedding(meta, self.embedder.model_id, self.embedder.dim, self.embedder.metric, self.path)
            return
        with store.write(self.con):
            if store.read_meta(self.con).get("embedding_model"):
                return
            import apsw
            import sqlite_vec

            store.set_meta(
                self.con, embedding_model=self.embedder.model_id, embedding_dim=str(self.embedder.dim),
                embedding_metric=self.embedder.metric,
                sem_levels=json.dumps(list(self.embedder.sem_levels)), created_at=now_stored(),
                created_by=f"memsif_lite {_version}", sqlite_version=apsw.sqlite_lib_version(),
                sqlite_vec_version=sqlite_vec.__version__ if hasattr(sqlite_vec, "__version__") else "",
            )

    def _record_schema(self) -> None:
        """The CoreFact schema is recorded in the file so a file describes itself. Opening a
        file with a different schema keeps the recorded one's facts and records the new one."""
        schema = json.dumps([{"name": t.name, "description": t.description} for t in self.config.fact_schema])
        if store.read_meta(self.con).get("fact_schema") != schema:
            with store.write(self.con):
                store.set_meta(self.con, fact_schema=schema)

    def _record_llm_call(self, r: CallRecord) -> None:
        self._llm_calls_made += 1
        try:
            self.con.execute(
                "INSERT INTO llm_calls(at, purpose, model, prompt_tokens, completion_tokens, latency_ms, ok, error) "
                "VALUES(?,?,?,?,?,?,?,?)",
                (now_stored(), r.purpose, r.model, r.prompt_tokens, r.completion_tokens, r.latency_ms, int(r.ok),
                 r.error))
        except Exception:  # noqa: BLE001 - accounting must never break a write
            log.exception("could not record an LLM call")

    # -- writing ---------------------------------------------------------------------------
    def add(self, speaker: str, text: str, *, at: Any = None, session: Any = None,
            source_id: str | None = None) -> int:
        """Store one message (one transaction) and update the structure. Returns its id."""
        return self.add_many([{"speaker": speaker, "text": text, "at": at, "session": session,
                               "source_id": source_id}])[0]

    def add_many(self, messages: Iterable[Mapping[str, Any]], *, progress=None) -> list[int]:
        """Store many messages in one transaction with batched embedding. Each item is a mapping
        with ``speaker``, ``text`` and optional ``at``, ``session``, ``source_id``. Nothing is
        written if any item is invalid. ``progress(n)`` is called as messages are placed."""
        rows = [self._validate(i, m) for i, m in enumerate(messages)]
        if not rows:
            return []
        with self._lock:
            self._check_open()
            passages = [f"{r['speaker']}: {r['text']}" for r in rows]
            hashes = [hashlib.sha256(p.encode("utf-8")).digest() for p in passages]
            vecs = self._embed_passages(passages, hashes)
            ents = [extract_entities(r["text"]) for r in rows]
            ids: list[int] = []
            created = now_stored()
            with store.write(self.con):
                for r, h, v, e, line in zip(rows, hashes, vecs, ents, passages):
                    self.con.execute(
                        "INSERT INTO messages(speaker, text, at, session, source_id, content_hash, created_at) "
                        "VALUES(?,?,?,?,?,?,?)",
                        (r["speaker"], r["text"], r["at"], r["session"], r["source_id"], h, created))
                    mid = self.con.last_insert_rowid()
                    self.con.execute("INSERT INTO message_vec(rowid, embedding) VALUES(?, ?)", (mid, v.tobytes()))
                    self.con.execute("INSERT INTO message_fts(rowid, speaker, text) VALUES(?,?,?)",
                                     (mid, r["speaker"], r["text"]))
                    self.segment_builder.place(mid, v, e, r["at"], line)
                    ids.append(mid)
                    if progress is not None:
                        progress(1)
            return ids

    def _validate(self, i: int, m: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(m, Mapping):
            raise InvalidInputError(f"message {i}: expected a mapping with 'speaker' and 'text'")
        unknown = set(m) - {"speaker", "text", "at", "session", "source_id"}
        if unknown:
            raise InvalidInputError(f"message {i}: unknown keys {sorted(unknown)}")
        speaker, text = m.get("speaker"), m.get("text")
        if not isinstance(speaker, str) or not speaker.strip():
            raise InvalidInputError(f"message {i}: speaker must be a non-empty string")
        if not isinstance(text, str):
            raise InvalidInputError(f"message {i}: text must be a string, got {type(text).__name__}")
        if not text.strip():
            raise InvalidInputError(f"message {i}: text is empty")
        if len(text) > self.config.max_message_chars:
            raise InvalidInputError(f"message {i}: text longer than max_message_chars ({self.config.max_message_chars})")
        speaker = " ".join(speaker.split())
        if len(speaker) > _MAX_SPEAKER:
            raise InvalidInputError(f"message {i}: speaker longer than {_MAX_SPEAKER} characters")
        for name, val in (("speaker", speaker), ("text", text)):
            try:
                val.encode("utf-8")
            except UnicodeEncodeError as e:
                raise InvalidInputError(f"message {i}: {name} is not valid Unicode text ({e.reason})") from None
        at = m.get("at")
        stored_at = now_stored() if at is None else to_stored(at)
        session = m.get("session")
        if session is not None:
            if isinstance(session, bool) or not isinstance(session, (str, int)):
                raise InvalidInputError(f"message {i}: session must be a string or an integer")
            session = str(session)
            if not session.strip() or len(session) > _MAX_SESSION:
                raise InvalidInputError(f"message {i}: session must be 1-{_MAX_SESSION} characters")
            try:
                session.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInputError(f"message {i}: session is not valid Unicode text") from None
        source_id = m.get("source_id")
        if source_id is not None and (not isinstance(source_id, str) or len(source_id) > _MAX_SESSION):
            raise InvalidInputError(f"message {i}: source_id must be a short string")
        return {"speaker": speaker, "text": text, "at": stored_at, "session": session, "source_id": source_id}

    def _embed_passages(self, passages: Sequence[str], hashes: Sequence[bytes]) -> np.ndarray:
        """Embed with the content-hash cache: a passage already in the file is not embedded again."""
        out = np.zeros((len(passages), self.embedder.dim), dtype=np.float32)
        todo: dict[bytes, list[int]] = {}
        for i, h in enumerate(hashes):
            row = self.con.execute(
                "SELECT v.embedding FROM messages m JOIN message_vec v ON v.rowid = m.id "
                "WHERE m.content_hash=? LIMIT 1", (h,)).fetchone()
            if row is not None:
                out[i] = np.frombuffer(row[0], dtype=np.float32)
            else:
                todo.setdefault(h, []).append(i)
        if todo:
            firsts = [idx[0] for idx in todo.values()]
            fresh = self.embedder.embed([passages[i] for i in firsts], kind="passage")
            fresh = validate_vectors(fresh, len(firsts), self.embedder.dim)
            for vec, idx in zip(fresh, todo.values()):
                out[idx] = vec
        return out

    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return validate_vectors(self.embedder.embed(list(texts), kind="passage"), len(texts), self.embedder.dim)

    def embed_query(self, text: str) -> np.ndarray:
        v = self._query_cache.get(text)
        if v is None:
            v = validate_vectors(self.embedder.embed([text], kind="query"), 1, self.embedder.dim)[0]
            self._query_cache[text] = v
            if len(self._query_cache) > 512:
                self._query_cache.popitem(last=False)
        return v

    def _segment_closed(self, segment_id: int) -> None:
        if self.llm is not None:
            system, user, validate = prompts.title(self.segment_builder.lines(segment_id, 12))
            title = self.llm.complete_json("title", system, user, validate, max_tokens=30)
            if title:
                self.con.execute("UPDATE segments SET title=? WHERE id=?", (title, segment_id))
        tid = self.trajectory_builder.assign(segment_id)
        self.con.execute("UPDATE trajectories SET title=coalesce(title, (SELECT title FROM segments WHERE id=?)) "
                         "WHERE id=?", (segment_id, tid))
        self.core_facts.consolidate(segment_id)

    def _accumulate(self, query: str, qvec: np.ndarray, evidence: Sequence[Evidence]) -> None:
        with store.write(self.con):
            self.active_facts_store.accumulate(query, qvec, evidence)

    # -- reading ---------------------------------------------------------------------------
    def search(self, query: str, *, k: int = 10, level: str = "message") -> list[SearchResult]:
        """Hybrid search: dense KNN (sqlite-vec) and BM25 (FTS5) fused by reciprocal rank fusion.
        ``level`` is ``"message"``, ``"segment"`` or ``"trajectory"``."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("query must be a non-empty string")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
            raise InvalidInputError("k must be an integer in [1, 1000]")
        if level not in ("message", "segment", "trajectory"):
            raise InvalidInputError("level must be 'message', 'segment' or 'trajectory'")
        with self._lock:
            self._check_open()
            return self.retriever.search(query, k=k, level=level)

    def get(self, message_id: int) -> Message:
        with self._lock:
            self._check_open()
            row = self.con.execute("SELECT id, speaker, text, at, session, source_id FROM messages WHERE id=?",
                                   (message_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no message with id {message_id}")
        return Message(row[0], row[1], row[2], from_stored(row[3]), row[4], row[5])

    def messages(self) -> list[Message]:
        with self._lock:
            self._check_open()
            rows = self.con.execute("SELECT id, speaker, text, at, session, source_id FROM messages ORDER BY id").fetchall()
        return [Message(r[0], r[1], r[2], from_stored(r[3]), r[4], r[5]) for r in rows]

    def segments(self) -> list[Segment]:
        """All Topical Segments in order, with their messages, span, entities and a label."""
        with self._lock:
            self._check_open()
            members: dict[int, list[int]] = {}
            for mid, sid in self.con.execute("SELECT message_id, segment_id FROM message_units ORDER BY message_id"):
                members.setdefault(sid, []).append(mid)
            rows = self.con.execute(
                "SELECT id, trajectory_id, entities, start_at, end_at, closed, title FROM segments ORDER BY id").fetchall()
        return [Segment(r[0], r[1], tuple(members.get(r[0], ())), from_stored(r[3]), from_stored(r[4]),
                        tuple(sorted(json.loads(r[2]))), r[6] or _label(json.loads(r[2])), bool(r[5]))
                for r in rows]

    def trajectories(self) -> list[Trajectory]:
        """All Event Trajectories, with their segments and messages in order."""
        segs = self.segments()
        by_traj: dict[int, list[Segment]] = {}
        for s in segs:
            if s.trajectory_id is not None:
                by_traj.setdefault(s.trajectory_id, []).append(s)
        with self._lock:
            rows = self.con.execute("SELECT id, entities, start_at, end_at, title FROM trajectories ORDER BY id").fetchall()
        out = []
        for r in rows:
            ss = by_traj.get(r[0], [])
            out.append(Trajectory(r[0], tuple(s.id for s in ss), tuple(m for s in ss for m in s.message_ids),
                                  from_stored(r[2]), from_stored(r[3]), tuple(sorted(json.loads(r[1]))),
                                  r[4] or _label(json.loads(r[1]))))
        return out

    def stats(self) -> dict[str, int]:
        """Counts of everything in the file."""
        with self._lock:
            self._check_open()
            q = lambda sql: int(self.con.execute(sql).fetchone()[0])  # noqa: E731
            return {
                "messages": q("SELECT count(*) FROM messages"),
                "segments": q("SELECT count(*) FROM segments"),
                "trajectories": q("SELECT count(*) FROM trajectories"),
                "core_facts": q("SELECT count(*) FROM core_facts WHERE valid_to IS NULL"),
                "superseded_facts": q("SELECT count(*) FROM core_facts WHERE valid_to IS NOT NULL"),
                "active_facts": q("SELECT count(*) FROM active_facts"),
                "candidates": q("SELECT count(*) FROM candidate_clusters"),
                "llm_calls": q("SELECT count(*) FROM llm_calls"),
                "llm_failures": q("SELECT count(*) FROM llm_calls WHERE ok=0"),
            }


    # -- facts -----------------------------------------------------------------------------------
    def facts(self, *, subject: str | None = None, type: str | None = None,  # noqa: A002 - the paper's name
              include_superseded: bool = False) -> list[CoreFact]:
        """CoreFacts, current ones only unless ``include_superseded``; ``subject`` matches
        case-insensitively."""
        sql = "SELECT id, subject, type, stmt, valid_from, valid_to, superseded_by, origin FROM core_facts WHERE 1=1"
        args: list[Any] = []
        if subject is not None:
            sql += " AND lower(subject)=lower(?)"
            args.append(subject)
        if type is not None:
            sql += " AND lower(type)=lower(?)"
            args.append(type)
        if not include_superseded:
            sql += " AND valid_to IS NULL"
        with self._lock:
            self._check_open()
            rows = self.con.execute(sql + " ORDER BY valid_from, id", args).fetchall()
            return [CoreFact(r[0], r[1], r[2], r[3], from_stored(r[4]), from_stored(r[5]) if r[5] else None, r[6],
                             self._fact_sources(r[0]), r[7]) for r in rows]

    def _fact_sources(self, fid: int) -> tuple[int, ...]:
        return tuple(m for (m,) in self.con.execute(
            "SELECT message_id FROM fact_sources WHERE fact_id=? ORDER BY message_id", (fid,)))

    def fact_history(self, fact_id: int) -> list[FactEvent]:
        """Every change to a CoreFact, oldest first."""
        with self._lock:
            self._check_open()
            if self.con.execute("SELECT 1 FROM core_facts WHERE id=?", (fact_id,)).fetchone() is None:
                raise NotFoundError(f"no fact with id {fact_id}")
            rows = self.con.execute("SELECT at, op, stmt, detail FROM fact_history WHERE fact_id=? ORDER BY id",
                                    (fact_id,)).fetchall()
        return [FactEvent(from_stored(r[0]), r[1], r[2], r[3]) for r in rows]

    def active_facts(self) -> list[ActiveFact]:
        """Promoted ActiveFacts with provenance and the queries that triggered them."""
        with self._lock:
            self._check_open()
            rows = self.con.execute(
                "SELECT a.id, a.cluster_id, a.subject, a.stmt, c.score_src, c.score_qry FROM active_facts a "
                "JOIN candidate_clusters c ON c.id=a.cluster_id ORDER BY a.id").fetchall()
            return [ActiveFact(r[0], r[1], r[2], r[3], self._cluster_messages(r[1]), self._cluster_queries(r[1]),
                               r[4], r[5]) for r in rows]

    def candidates(self) -> list[CandidateCluster]:
        """All candidate clusters C_k with their statements, queries, sources and scores."""
        with self._lock:
            self._check_open()
            rows = self.con.execute(
                "SELECT c.id, c.subject, c.score_src, c.score_qry, a.id FROM candidate_clusters c "
                "LEFT JOIN active_facts a ON a.cluster_id=c.id ORDER BY c.id").fetchall()
            return [CandidateCluster(
                r[0], r[1], tuple(x for (x,) in self.con.execute(
                    "SELECT stmt FROM cluster_statements WHERE cluster_id=? ORDER BY id", (r[0],))),
                self._cluster_queries(r[0]), self._cluster_messages(r[0]), r[2], r[3], r[4]) for r in rows]

    def _cluster_messages(self, cid: int) -> tuple[int, ...]:
        return tuple(m for (m,) in self.con.execute(
            "SELECT DISTINCT e.message_id FROM cluster_statements s JOIN cluster_evidence e ON e.statement_id=s.id "
            "WHERE s.cluster_id=? ORDER BY e.message_id", (cid,)))

    def _cluster_queries(self, cid: int) -> tuple[str, ...]:
        return tuple(q for (q,) in self.con.execute(
            "SELECT query FROM cluster_queries WHERE cluster_id=? ORDER BY id", (cid,)))

    def forget(self, *, message_id: int | None = None, fact_id: int | None = None) -> None:
        """Delete a message (and everything derived only from it) or a CoreFact, in one
        transaction. Exactly one of ``message_id`` / ``fact_id``."""
        if (message_id is None) == (fact_id is None):
            raise InvalidInputError("give exactly one of message_id or fact_id")
        with self._lock:
            self._check_open()
            with store.write(self.con):
                if message_id is not None:
                    if self.con.execute("SELECT 1 FROM messages WHERE id=?", (message_id,)).fetchone() is None:
                        raise NotFoundError(f"no message with id {message_id}")
                    forget_message(self.con, message_id, self.active_facts_store)
                else:
                    if self.con.execute("SELECT 1 FROM core_facts WHERE id=?", (fact_id,)).fetchone() is None:
                        raise NotFoundError(f"no fact with id {fact_id}")
                    forget_fact(self.con, fact_id)  # type: ignore[arg-type]

    # -- portability and health ------------------------------------------------------------------
    def export_to(self, path: str | Path) -> int:
        """Write everything (messages with vectors, structure, facts with history, clusters,
        LLM-call accounting) as JSON lines; returns the number of lines."""
        from .maintenance import export_rows

        n = 0
        with self._lock:
            self._check_open()
            tmp = Path(f"{path}.partial")
            with self.con:  # one read transaction: a consistent snapshot
                with open(tmp, "w", encoding="utf-8") as fh:
                    for obj in export_rows(self.con):
                        fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
                        n += 1
            tmp.replace(path)
        return n

    def import_from(self, path: str | Path) -> dict[str, int]:
        """Load an export into this (fresh) memory file, in one transaction."""
        from .maintenance import import_rows, read_export

        with self._lock:
            self._check_open()
            try:
                fh = open(path, encoding="utf-8")
            except OSError as e:
                raise InvalidInputError(f"cannot read {path}: {e}") from None
            with fh, store.write(self.con):
                return import_rows(self.con, read_export(fh), model_id=self.embedder.model_id, dim=self.embedder.dim)

    def backup(self, dest: str | Path) -> None:
        """A consistent, self-contained copy (``VACUUM INTO``), safe while others write."""
        from .maintenance import backup

        with self._lock:
            self._check_open()
            backup(self.con, dest)

    def check(self) -> list[str]:
        """Integrity, full-text and vector-table checks; an empty list means healthy."""
        from .maintenance import check_connection

        with self._lock:
            self._check_open()
            return check_connection(self.con)

    # -- the query pipeline ----------------------------------------------------------------------
    def context(self, question: str, *, budget_tokens: int = 2000) -> Context:
        """Facts, then (if they do not suffice) dated evidence from the interaction memory, as a
        ready-to-paste block within ``budget_tokens`` — for agents that call their own LLM.
        Reads only: nothing is written."""
        self._check_question(question, budget_tokens)
        with self._lock:
            self._check_open()
            return build_context(self, question, budget_tokens)

    def ask(self, question: str, *, budget_tokens: int = 2000, now: Any = None) -> Answer:
        """Answer from memory (paper §3.5). With an LLM: its answer from the assembled context;
        offline: an extractive answer (``Answer.extractive``). Afterwards the query-local
        evidence feeds the ActiveFact track (one transaction). ``now`` fixes "today" for the
        answer prompt (tests, benchmarks)."""
        self._check_question(question, budget_tokens)
        at = from_stored(to_stored(now)) if now is not None else None
        with self._lock:
            self._check_open()
            return answer_question(self, question, budget_tokens, at)

    def _check_question(self, question: Any, budget_tokens: Any) -> None:
        if not isinstance(question, str) or not question.strip():
            raise InvalidInputError("question must be a non-empty string")
        if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or not 50 <= budget_tokens <= 200_000:
            raise InvalidInputError("budget_tokens must be an integer in [50, 200000]")


def _label(entity_counts: Mapping[str, int], n: int = 4) -> str:
    """Top entities by count; whole names preferred over their parts."""
    ranked = sorted(entity_counts.items(), key=lambda kv: (-kv[1], -len(kv[0].split()), kv[0]))
    picked: list[str] = []
    for e, _ in ranked:
        if any(e in p.split() for p in picked):
            continue
        picked.append(e)
        if len(picked) == n:
            break
    return ", ".join(picked)
