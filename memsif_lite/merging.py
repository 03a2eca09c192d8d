"""``Memory.merge_from`` / ``memsif merge``: bring into this file what another copy of the same
memory has, without losing, duplicating or resurrecting anything.

* The other file is untrusted: :func:`memsif_lite.store.inspect` refuses it exactly as
  ``Memory(...)`` would (same typed errors) before it is opened, read-only, and its messages are
  validated like input. It is never written. If it is encrypted, its own key (``key=``) opens
  it; that key is used for this read only and wiped after it, never stored.
* **Messages** present in both (same ``source_id`` and speaker, else same speaker, text and time:
  :meth:`~memsif_lite.db.filtering.Filtering.already_present`) are kept once; the others are added
  with their time and UTC offset. A file written with another embedding model has its messages
  re-embedded with this file's model (the file stays single-model); else its vectors are reused.
* **Forgetting wins**: tombstones of both files are united; a message either side forgot is not
  added, and a message here that the other side forgot is forgotten here (``forget_message``,
  so what was derived only from it goes too).
* **Structure** is rebuilt through the work queue from the earliest point the merge touches (the
  earliest added or removed message, or a local ``forget`` not yet reflowed): the structure and
  CoreFacts derived from messages from that point on are removed, and those messages are stored
  again, with the added ones, under new ids in time order (ties broken by speaker, text, session,
  source id), each with its *place* step. The point moves back to the start of the segment that
  holds the last message before it, and further while a CoreFact draws on messages on both sides
  of it, so the replay sees exactly the state an ingest of the union in time order would have
  seen: the queue then yields the same segments, trajectories and CoreFacts (with their
  Add/Update/Merge/Supersede history by valid-from time) — offline at once, with an LLM when the
  queue runs. Messages from the rebuild point on get new ids (ids follow time order); ActiveFact
  evidence and pending steps of segments that stay follow them.
* **ActiveFacts**: the other file's candidate clusters are folded in as the query track does
  (statements with their evidence, queries deduplicated by text, so a query is never counted twice).

All data changes happen in one transaction (``kill -9`` leaves the old file, or the merged file
with its place steps pending); ``dry_run`` reports without writing.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import history, store
from .active_facts import ActiveFactStore, Evidence
from .config import Config
from .db import Database
from .db.changes import OPS, CarriedChange
from .db.merge import FullMessage
from .db.rewind import renumber
from .embed import Embeddings, passage, passage_hash
from .entities import extract_entities
from .errors import InvalidInputError, MemoryFileError
from .forgetting import Batch, forget_message, recompute_unit
from .int8 import dequantize, quantize
from .ingest import MessageIn
from .keys import Key, KeyLike, as_key
from .pipelines import Pipelines
from .steps import REKEYED, STEPS, Rebuild, StepKind
from .timeutil import is_stored, now_stored
from .worker import Worker

__all__ = ["MergeReport", "OtherFile", "read_other", "merge", "merge_file"]


@dataclass(frozen=True)
class MergeReport:
    """What a merge did (or, with ``dry_run``, would do): messages ``added``, ``skipped_present``
    (already here), ``skipped_forgotten`` (a tombstone on either side), ``removed_by_tombstones``
    (here, forgotten there), ``tombstones_added``, ``re_embedded`` (other embedding model);
    ``rebuilt_from`` (stored UTC time) and ``replayed`` (messages placed again); ActiveFact
    ``queries_added``; ``changes_copied``: rows of its change log copied into this one's; CoreFacts
    ``facts_added`` (new, or current again), ``facts_superseded`` and ``facts_removed`` as "subject:
    statement (type, from date)" — only when the rebuild ran inside the merge (offline, inline); else
    empty; ``pending_steps`` left in the queue."""

    other: str
    added: int = 0
    skipped_present: int = 0
    skipped_forgotten: int = 0
    removed_by_tombstones: int = 0
    tombstones_added: int = 0
    re_embedded: int = 0
    rebuilt_from: str | None = None
    replayed: int = 0
    queries_added: int = 0
    #: rows of the other file's change log copied into this file's (docs/history.md, "Merges")
    changes_copied: int = 0
    facts_added: tuple[str, ...] = field(default_factory=tuple)
    facts_superseded: tuple[str, ...] = field(default_factory=tuple)
    facts_removed: tuple[str, ...] = field(default_factory=tuple)
    pending_steps: int = 0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("facts_added", "facts_superseded", "facts_removed"):
            d[k] = list(d[k])
        return d


@dataclass(frozen=True)
class OtherFile:
    """What a merge reads from the other file."""

    path: Path
    model_id: str
    dim: int
    messages: list[FullMessage]
    tombstones: set[bytes]
    clusters: list[tuple[str, list[tuple[str, list[int]]], list[tuple[str, bytes]]]]
    #: the other file's own name for itself (meta ``file_id``, schema 11): the log's ``merge:<file id>``
    file_id: str = "unknown"
    #: its change log (schema 11), copied into this file's (docs/history.md, "Merges")
    changes: list[CarriedChange] = field(default_factory=list)


def read_other(path: str | Path, *, busy_timeout_ms: int, max_chars: int, key: Key | None = None) -> OtherFile:
    """Inspect (as ``Memory(...)`` does: the same typed errors), open read-only (with ``key`` if
    it is encrypted), read and validate."""
    p = Path(path)
    if key is not None:
        store.require_cipher()
    info = store.inspect(p, key=key)
    if info is None:
        raise MemoryFileError(f"no memory file at {p}")
    dim = int(info.meta["embedding_dim"])
    model_id = info.meta.get("embedding_model", "")
    quiet = store.QuietReads.now(p)  # nothing is written beside a file no one else has open
    while True:
        con = store.connect(p, dim=dim, busy_timeout_ms=busy_timeout_ms, readonly=True, immutable=quiet.immutable,
                            key=key)
        try:
            db = Database(con)
            with db.read():
                msgs = db.merge.messages(has_offset=info.holds("utc_offsets"), int8=info.holds("int8_vectors"),
                                         has_known=info.holds("record_time"))
                tombs = db.merge.tombstones(has_table=info.holds("tombstones"))
                clusters = db.merge.clusters() if info.holds("clusters") else []
                log = db.changes.carried(has_uid=info.holds("change_uids")) if info.holds("change_log") else []
        finally:
            con.close()
        if not quiet.immutable or quiet.still_quiet():
            break
        quiet = store.QuietReads(p, None)  # opened or changed meanwhile: read it the shared way
    for m in msgs:
        _validate(m, dim, max_chars, p)
    if any(len(h) != 32 for h in tombs):
        raise MemoryFileError(f"{p} has malformed tombstones")
    for c in log:
        why = _change_problem(c)
        if why is not None:
            raise MemoryFileError(f"{p}: change {c.id} is not one memsif_lite logs ({why})")
    file_id = str(info.meta.get("file_id", "unknown"))
    if not _FILE_ID.match(file_id):
        raise MemoryFileError(f"{p} names itself {file_id[:40]!r}, not as memsif_lite does")
    return OtherFile(p, model_id, dim, msgs, tombs, clusters, file_id, log)


_FILE_ID = re.compile(r"^[0-9a-f]{32}$|^unknown$")
_DECISION = re.compile(r"^[0-9a-f]{64}$")
_ACTOR = re.compile(r"^(rule|user|memsif|llm:[^\x00-\x1f\x7f]{1,200}|merge:[0-9a-f]{32}|merge:unknown)$")


def _change_problem(c: CarriedChange) -> str | None:
    """Why a row of the other file's log is not one memsif writes, or None."""
    if type(c.uid) is not int:
        return "its uid"
    if not is_stored(c.at):
        return "its time"
    if not isinstance(c.actor, str) or not _ACTOR.match(c.actor):
        return "its actor"
    if c.op not in OPS:
        return "its operation"
    if not (c.purpose is None or (isinstance(c.purpose, str) and len(c.purpose) <= 100)):
        return "its purpose"
    if not (c.summary is None or (isinstance(c.summary, str) and len(c.summary) <= 100_000)):
        return "its summary"
    if not (c.decision is None or (isinstance(c.decision, str) and _DECISION.match(c.decision))):
        return "its decision"
    if not (c.origin is None or (isinstance(c.origin, str) and _FILE_ID.match(c.origin))):
        return "its origin"
    if not (c.undoes is None or (type(c.undoes) is int and c.undoes < c.id)):
        return "the change it undoes"
    return None


def _validate(m: FullMessage, dim: int, max_chars: int, p: Path) -> None:
    """A message of the other file must be one ``add`` would have stored."""
    try:
        ok = MessageIn.from_mapping(dict(speaker=m.speaker, text=m.text, at=m.at, session=m.session,
                                         source_id=m.source_id), max_chars=max_chars)
    except InvalidInputError as e:
        raise MemoryFileError(f"{p}: message {m.id} is invalid ({e})") from None
    vec = np.frombuffer(m.vector, dtype=np.float32) if len(m.vector) == 4 * dim else None
    if (ok.speaker != m.speaker or ok.at != m.at or vec is None or not np.isfinite(vec).all()
            or (m.utc_offset_min is not None and not (isinstance(m.utc_offset_min, int)
                                                     and abs(m.utc_offset_min) <= 24 * 60))):
        raise MemoryFileError(f"{p}: message {m.id} is not stored as memsif_lite stores messages")


def merge_file(db: Database, path: str | Path, *, mine: Path, pipes: Pipelines, cfg: Config, process_now: bool,
               dry_run: bool, key: KeyLike | None = None) -> MergeReport:
    """``Memory.merge_from``: read and check the other file (opened with ``key``, wiped once it
    is read), then :func:`merge`."""
    p = Path(path)
    secret = as_key(key, "other file's key")
    if p.exists() and mine.exists() and p.resolve() == mine.resolve():
        raise InvalidInputError(f"{p} is this memory file; merge another copy into it")
    try:
        other = read_other(p, busy_timeout_ms=cfg.busy_timeout_ms, max_chars=cfg.max_message_chars, key=secret)
    finally:
        if secret is not None:
            secret.wipe()
    return merge(db, other, embeddings=pipes.embeddings, active_store=pipes.active_facts, worker=pipes.worker,
                 process_now=process_now, dry_run=dry_run)


def _key(m: FullMessage) -> tuple:
    return ("s", m.source_id, m.speaker) if m.source_id is not None else ("t", m.speaker, m.at, m.text)


def _fact_line(f: tuple[str, str, str, str, bool]) -> str:
    return f"{f[0]}: {f[2]} ({f[1]}, from {f[3][:10]})"


def merge(db: Database, other: OtherFile, *, embeddings: Embeddings, active_store: ActiveFactStore,
          worker: Worker, process_now: bool, dry_run: bool) -> MergeReport:
    """Merge ``other`` into ``db`` (see the module docstring). ``process_now``: run the queued
    steps inside the merge's transaction (offline judges only)."""
    emb = embeddings.embedder
    same_model = other.model_id == emb.model_id and other.dim == emb.dim
    with db.read():
        mine_tombs = db.tombstones.all()
        every_tomb = mine_tombs | other.tombstones
        remove = [m for m in db.merge.messages() if m.tombstone in other.tombstones]
        incoming: list[FullMessage] = []
        seen: set[tuple] = set()
        present = forgotten = 0
        for m in sorted(other.messages, key=lambda x: x.order):
            if m.tombstone in every_tomb:
                forgotten += 1
            elif _key(m) in seen or db.filters.already_present(m.speaker, m.text, m.at, m.source_id):
                present += 1
            else:
                seen.add(_key(m))
                incoming.append(m)
        dirty = db.tombstones.dirty_from()
        facts_before = db.merge.facts_summary()
        times = [m.at for m in incoming] + [m.at for m in remove] + ([dirty] if dirty else [])
        # what the rebuild below will replay, read the same way it will be (the messages forgotten
        # here first are not replayed), so that a dry run reports what the merge does
        start, _, replaced, _ = rebuild_point(db, min(times), {m.id for m in remove}) if times else (None, None, [], [])
        uids = db.changes.uids()
    report = MergeReport(str(other.path), added=len(incoming), skipped_present=present, skipped_forgotten=forgotten,
                         removed_by_tombstones=len(remove), tombstones_added=len(other.tombstones - mine_tombs),
                         re_embedded=0 if same_model else len(incoming), rebuilt_from=start,
                         replayed=len(replaced) + len(incoming), dry_run=dry_run,
                         changes_copied=len({c.uid for c in other.changes} - set(uids)))
    if dry_run:
        return report
    # embedding (and the other file's query vectors) with no transaction open
    passages = [passage(m.speaker, m.text) for m in incoming]
    hashes = [passage_hash(p) for p in passages]
    if same_model:
        vectors = [m.vector for m in incoming]
    else:
        with db.read():
            vectors = [np.ascontiguousarray(v, dtype=np.float32).tobytes()
                       for v in embeddings.passages_cached(passages, hashes)] if incoming else []
    queries = _query_vectors(other, embeddings.query, same_model)
    fresh = [FullMessage(m.id, m.speaker, m.text, m.at, m.session, m.source_id, h, m.created_at, m.utc_offset_min, v)
             for m, h, v in zip(incoming, hashes, vectors, strict=True)]
    with db.write(), db.changes.record("merge", f"merge:{other.file_id}") as change:
        # another process may have added some of them meanwhile
        fresh = [m for m in fresh if not db.filters.already_present(m.speaker, m.text, m.at, m.source_id)]
        refused = history.take_back_theirs(db, other.changes, f"merge:{other.file_id}")
        now = now_stored()
        for h in sorted(other.tombstones - mine_tombs):
            db.tombstones.add(h, now)
        removed = 0
        with db.changes.forgetting() as erased:  # what the tombstones remove is not kept in the log either
            batch = Batch(db, [m.id for m in remove])  # (the log searched once, each unit recomputed once)
            for m in remove:
                if db.messages.exists(m.id):
                    forget_message(db, m.id, active_store, batch)
                    erased.append(m.id)
                    removed += 1
            batch.recompute_units()
        dirty = db.tombstones.dirty_from()
        times = [m.at for m in fresh] + [m.at for m in remove] + ([dirty] if dirty else [])
        start, placed = rebuild(db, min(times), fresh) if times else (None, [])
        if start is not None or removed:  # rows were rewritten under the caches without staging
            db.merge.caches_changed()
        replayed = len(placed)
        change.touch("messages", [nid for nid, _, _ in placed])
        change.summary = f"{len(fresh)} messages added, {removed} removed, {replayed} placed again"
        if process_now:  # saves reading each vector back
            for nid, vec, text in placed:
                # the stored (int8) direction, exactly what a later step reads back
                worker.hint(nid, dequantize(quantize(np.frombuffer(vec, dtype=np.float32))), extract_entities(text))
        db.tombstones.settle()
        copied = history.carry_log(db, other.changes, file_id=other.file_id, refused=refused,
                                   messages=_their_messages(db, other, every_tomb))
        n_queries = _fold_clusters(db, other, active_store, queries)
        if not (fresh or removed or start is not None or copied or n_queries or report.tombstones_added):
            change.skip = True  # nothing changed: nothing to log
        if process_now:
            worker.run()
        facts_after = db.merge.facts_summary() if process_now else facts_before  # else: known once the queue ran
        pending, _ = db.queue.backlog()
    gone = facts_before - facts_after
    return MergeReport(
        str(other.path), added=len(fresh), skipped_present=present + len(incoming) - len(fresh),
        skipped_forgotten=forgotten, removed_by_tombstones=removed, tombstones_added=report.tombstones_added,
        re_embedded=0 if same_model else len(fresh), rebuilt_from=start, replayed=replayed, queries_added=n_queries,
        changes_copied=copied,
        facts_added=tuple(sorted(_fact_line(f) for f in facts_after - facts_before if f[4])),
        facts_superseded=tuple(sorted(_fact_line(f) for f in facts_after - facts_before if not f[4])),
        facts_removed=tuple(sorted(_fact_line(f) for f in gone
                                   if (f[0], f[1], f[2], f[3], not f[4]) not in facts_after)),
        pending_steps=pending, dry_run=False)


def _their_messages(db: Database, other: OtherFile, tombstones: set[bytes]) -> dict[int, int | None]:
    """The other file's message ids its log names -> this file's (None: forgotten on either side)."""
    named = {m for c in other.changes for m in c.ids.get("messages", ())}
    out: dict[int, int | None] = {}
    for m in other.messages:
        if m.id in named:
            out[m.id] = None if m.tombstone in tombstones else db.filters.present_id(m.speaker, m.text, m.at,
                                                                                        m.source_id)
    return out


def _query_vectors(other: OtherFile, embed_query: Callable[[str], np.ndarray], same_model: bool) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for _, _, qs in other.clusters:
        for q, vec in qs:
            if q in out:
                continue
            v = np.frombuffer(vec, dtype=np.float32) if same_model and len(vec) == 4 * other.dim else None
            if v is None or not np.isfinite(v).all():
                v = embed_query(q)
            out[q] = np.ascontiguousarray(v, dtype=np.float32).tobytes()
    return out


def rebuild_point(db: Database, point: str, leaving: set[int] | frozenset[int] = frozenset(),
                  ) -> tuple[str, int | None, list[FullMessage], list[int]]:
    """Where a rebuild asked to start at ``point`` really starts (moved back as the module docstring
    says): (start, the first segment dropped, the messages placed again, the CoreFacts removed).
    ``leaving``: messages forgotten before the rebuild runs (a dry run still sees them). Reads only."""
    while True:
        last = db.merge.last_placed_before(point)
        first_seg = None if last is None else last[0]
        start = point if last is None else min(point, last[1])
        replaced = [m for m in db.merge.replaced(start, first_seg) if m.id not in leaving]
        earliest, facts = db.merge.earliest_fact_source(m.id for m in replaced)
        if earliest is None or earliest >= start:
            return start, first_seg, replaced, facts
        point = earliest


def rebuild(db: Database, point: str, incoming: list[FullMessage]) -> tuple[str, list[tuple[int, bytes, str]]]:
    """Remove the structure and CoreFacts from ``point`` (moved back as the module docstring says)
    and store those messages again with ``incoming``, in time order, each with its place step.
    Returns the rebuild point and (new id, vector, text) of each message to place. Inside the
    caller's transaction."""
    start, first_seg, replaced, facts = rebuild_point(db, point)
    for fid in facts:
        if db.facts.exists(fid):
            db.facts.delete(fid)
    segs, trajs = db.merge.segments_from(first_seg)
    dropped = set(segs)
    for sid in segs:
        db.merge.drop_segment(sid)
    touched: set[int] = set()
    for m in replaced:  # a message from the point on that sits in an earlier segment (a file written out of order)
        seg = db.structure.segment_of_message(m.id)
        if seg is not None:
            db.structure.unplace_message(m.id)
            touched.add(seg)
    for sid in sorted(touched):
        tid = db.structure.trajectory_of_segment(sid)
        recompute_unit(db, "segment", sid)
        if tid is not None:
            trajs.append(tid)
    for tid in sorted(set(trajs)):
        recompute_unit(db, "trajectory", tid)
    kept = Rebuild(dropped_segments=dropped, moved_messages={m.id for m in replaced})
    base = db.merge.max_message_id()
    now = now_stored()
    order = sorted([(m, True) for m in replaced] + [(m, False) for m in incoming], key=lambda x: x[0].order)
    first_new = base + 1
    rekeyed = 0
    for i, (m, existing) in enumerate(order):
        nid = base + 1 + i
        db.merge.insert(nid, m, m.vector, m.content_hash, known_at=now, moved=m.id if existing else None)
        db.queue.push(StepKind.PLACE, nid, now)
        if not existing:
            continue
        db.merge.move_evidence(m.id, nid)
        db.items.move(m.id, nid)  # a session item stays after the message it followed
        for sub, kind, step_seg, payload in db.merge.queued(m.id):
            if STEPS.survives(kind, step_seg, payload, kept):  # queued steps of what stays move after the point
                db.merge.rekey(m.id, sub, first_new, REKEYED + rekeyed)
                rekeyed += 1
            else:
                db.merge.unqueue(m.id, sub)
    renumber(db.con, {m.id: base + 1 + i for i, (m, existing) in enumerate(order) if existing})
    for m in replaced:
        db.messages.delete(m.id)
    return start, [(base + 1 + i, m.vector, m.text) for i, (m, _) in enumerate(order)]


def _fold_clusters(db: Database, other: OtherFile, active_store: ActiveFactStore, qvecs: dict[str, bytes]) -> int:
    """The other file's candidate clusters, fed to the query track; returns the queries added."""
    if not other.clusters:
        return 0
    ids = {m.id: m for m in other.messages}
    before = db.merge.query_count()
    for subject, stmts, queries in other.clusters:
        evidence = []
        for stmt, mids in stmts:
            mine = []
            for mid in mids:
                m = ids.get(mid)
                found = None if m is None else db.filters.present_id(m.speaker, m.text, m.at, m.source_id)
                if found is not None:
                    mine.append(found)
            if mine and stmt.strip():
                evidence.append(Evidence(stmt, subject, tuple(mine)))
        if not evidence:
            continue
        for q, _ in queries:
            active_store.accumulate(q, np.frombuffer(qvecs[q], dtype=np.float32), evidence)
    return db.merge.query_count() - before

