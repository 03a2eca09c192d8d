"""Portability and health: export / import (JSON lines), consistent backups, and ``check``.

Export writes one header line, then one line per row of every memsif table (BLOBs base64;
vectors included, so an import needs no re-embedding and reproduces the structure exactly).
Import only fills a *fresh* file, validates every vector (int8 codes, or float32 from exports
of files before schema 6, then finite and quantised; running sums float32 or float64) and inserts
in one transaction; the full-text index is rebuilt and token counts recounted. Backup uses ``VACUUM INTO``,
which copies one consistent snapshot even while another process is writing; :func:`compact` runs
``VACUUM`` in place.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
from pathlib import Path
from typing import IO, Any, Iterator

import apsw
import numpy as np

from .. import store
from ..errors import InvalidInputError, MemoryFileError, StorageError, StorageFullError
from ..fulltext import index_text
from ..int8 import quantize
from ..tokens import count_tokens
from .base import VEC_TABLES
from .messages import CREATED_AT, SHORTEN_CONTENT_KEYS, id_problems, index_fulltext, malformed_times, unindex_fulltext
from .partition import partition_problems
from .queue import malformed_steps
from .rewind import malformed_record_times
from .structure import (COUNT_TRAJECTORY_ENTITIES, DROP_COUNTS, NO_SUM, SEGMENT_SUM, STOW_SUMS, malformed_units,
                        trajectory_count_problems, trajectory_counts)

__all__ = ["TABLES", "export_rows", "read_export", "import_rows", "check_connection", "backup", "compact", "FORMAT"]

log = logging.getLogger("memsif_lite")

FORMAT = "memsif-export"
#: plain tables in dependency order, with their columns
TABLES: dict[str, tuple[str, ...]] = {
    "messages": ("id", "speaker", "text", "at", "session", "source_id", "content_hash", "created_at", "utc_offset_min"),
    "llm_calls": ("id", "at", "purpose", "model", "prompt_tokens", "completion_tokens", "latency_ms", "ok", "error"),
    "trajectories": ("id", "n_segments", "n_messages", "vec_sum", "entities", "start_at", "end_at", "title"),
    "segments": ("id", "trajectory_id", "n_messages", "vec_sum", "entities", "start_at", "end_at", "closed", "title"),
    "message_units": ("message_id", "segment_id", "entities", "phi", "decision"),
    "core_facts": ("id", "subject", "type", "stmt", "slot", "valid_from", "valid_to", "superseded_by", "created_at",
                   "updated_at", "origin"),
    "fact_sources": ("fact_id", "message_id"),
    "fact_history": ("id", "fact_id", "at", "op", "stmt", "detail"),
    "candidate_clusters": ("id", "subject", "created_at", "updated_at", "score_src", "score_qry"),
    "cluster_statements": ("id", "cluster_id", "stmt", "vector", "at"),
    "cluster_evidence": ("statement_id", "message_id"),
    "cluster_queries": ("id", "cluster_id", "query", "vector", "at"),
    "active_facts": ("id", "cluster_id", "subject", "stmt", "created_at", "updated_at"),
    "work_queue": ("id", "message_id", "sub", "kind", "segment_id", "payload", "created_at", "attempts"),
    "tombstones": ("hash", "created_at", "local_at"),
    "session_items": ("id", "session", "message_id", "at", "item"),
}
_META_KEEP = ("fact_schema", "created_at", "created_by")
#: columns added by later schema steps: an export made before them may lack them (NULL then)
_OPTIONAL = frozenset({"utc_offset_min"})


def _enc(v: Any) -> Any:
    return {"b64": base64.b64encode(v).decode("ascii")} if isinstance(v, (bytes, bytearray, memoryview)) else v


def _dec(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) != {"b64"} or not isinstance(v["b64"], str):
            raise InvalidInputError("bad binary value in export")
        return base64.b64decode(v["b64"], validate=True)
    if isinstance(v, list):
        raise InvalidInputError("unexpected list value in export")
    return v


def _no_constants(name: str) -> Any:
    raise InvalidInputError(f"non-finite number {name} in export")


def export_rows(con: Any) -> Iterator[dict]:
    meta = store.read_meta(con)
    yield {"format": FORMAT, "version": 1, "schema_version": store.latest_version(), "meta": meta}
    counts = trajectory_counts(con)
    for table, cols in TABLES.items():
        # a segment's running sum, where it is kept (an export holds it in the segments row, as before schema 16);
        # a message's created_at, whole (schema 19 keeps '' where it is the message's known_at)
        # a trajectory's entity counts as a JSON object in its row, as before schema 22 (trajectory_entities)
        sel = [SEGMENT_SUM if (table, c) == ("segments", "vec_sum") else CREATED_AT if (table, c) == (
            "messages", "created_at") else counts if (table, c) == ("trajectories", "entities") else c
            for c in cols]
        for row in con.execute(f"SELECT {', '.join(sel)} FROM {table} ORDER BY rowid"):
            yield {"table": table, "row": dict(zip(cols, (_enc(v) for v in row), strict=True))}
    for table in VEC_TABLES:
        for rowid, emb in con.execute(f"SELECT rowid, embedding FROM {table} ORDER BY rowid"):
            yield {"table": table, "row": {"rowid": rowid, "embedding": _enc(emb)}}


def read_export(fh: IO[str]) -> Iterator[dict]:
    for n, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line, parse_constant=_no_constants)
        except (json.JSONDecodeError, RecursionError) as e:
            raise InvalidInputError(f"export line {n} is not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise InvalidInputError(f"export line {n} is not an object")
        yield obj


def import_rows(con: Any, rows: Iterator[dict], *, model_id: str, dim: int) -> dict[str, int]:
    """Insert an export into a fresh, migrated file (caller holds the write transaction)."""
    header = next(rows, None)
    if not header or header.get("format") != FORMAT:
        raise InvalidInputError("not a memsif export (missing header line)")
    if not isinstance(header.get("schema_version"), int) or header["schema_version"] > store.latest_version():
        raise InvalidInputError("the export comes from a newer memsif_lite; upgrade to import it")
    meta = header.get("meta") or {}
    if meta.get("embedding_model") != model_id or str(meta.get("embedding_dim")) != str(dim):
        raise InvalidInputError(f"the export was made with embedding model {meta.get('embedding_model')!r} "
                                f"(dim {meta.get('embedding_dim')}); import it with the same model")
    if con.execute("SELECT count(*) FROM messages").fetchone()[0]:
        raise InvalidInputError("import needs a fresh memory file")
    counts: dict[str, int] = {}
    con.execute("PRAGMA defer_foreign_keys=ON")  # e.g. superseded_by points to a later fact
    store.set_meta(con, **{k: meta[k] for k in _META_KEEP if isinstance(meta.get(k), str)})
    for obj in rows:
        table, row = obj.get("table"), obj.get("row")
        if not isinstance(row, dict):
            raise InvalidInputError("export row without data")
        if table in TABLES:
            cols = TABLES[table]
            if set(row) - set(cols) or set(cols) - set(row) - _OPTIONAL:
                raise InvalidInputError(f"{table} row has columns {sorted(row)}, expected {sorted(cols)}")
            values = [_dec(row.get(c)) for c in cols]
            if table == "messages" and values[2] is not None and not str(values[2]).strip():
                raise InvalidInputError("empty message text in export")
            if table == "trajectories" or (table == "segments" and (values[3] != NO_SUM or values[1] is None)):
                values[3] = _sum_blob(values[3], dim)  # (a segment in a trajectory may keep none: NO_SUM)
            try:
                con.execute(f"INSERT INTO {table}({', '.join(cols)}) VALUES({', '.join('?' * len(cols))})", values)
            except apsw.Error as e:
                raise InvalidInputError(f"invalid {table} row in export: {e}") from None
        elif table in VEC_TABLES:
            rowid, emb = row.get("rowid"), _dec(row.get("embedding"))
            if not isinstance(rowid, int) or not isinstance(emb, bytes) or len(emb) not in (dim, 4 * dim):
                raise InvalidInputError(f"invalid vector row in {table}")
            if len(emb) == 4 * dim:  # an export from before schema 6: float32
                vec = np.frombuffer(emb, dtype=np.float32)
                if not np.isfinite(vec).all():
                    raise InvalidInputError(f"non-finite vector in {table}")
                emb = quantize(vec).tobytes()
            con.execute(f"INSERT INTO {table}(rowid, embedding) VALUES(?, vec_int8(?))", (rowid, emb))
        else:
            raise InvalidInputError(f"unknown table {table!r} in export")
        counts[table] = counts.get(table, 0) + 1
    # what an export holds in full (a trajectory's entity counts, counted again from its members: every
    # export; the others: an older one)
    for sql in (*STOW_SUMS, DROP_COUNTS, SHORTEN_CONTENT_KEYS, *COUNT_TRAJECTORY_ENTITIES):
        con.execute(sql)
    con.execute("INSERT INTO message_fts(message_fts) VALUES('delete-all')")
    for mid, speaker, text in con.execute("SELECT id, speaker, text FROM messages").fetchall():
        index_fulltext(con, mid, speaker, text)
    for mid, text in con.execute("SELECT id, text FROM messages WHERE tokens IS NULL").fetchall():
        con.execute("UPDATE messages SET tokens=? WHERE id=?", (count_tokens(text), mid))
    con.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key='vector_epoch'")
    # an export carries no record times: the caller's change log sets them (now) in this transaction;
    # until then each message's created_at stands in, so the check reads a time there
    con.execute("UPDATE messages SET known_at = created_at WHERE known_at IS NULL")
    problems = check_connection(con)
    if problems:
        raise InvalidInputError("the imported data is inconsistent: " + "; ".join(problems[:5]))
    return counts


def _sum_blob(v: Any, dim: int) -> Any:
    """A running sum from an export: float32 as stored, float64 (before schema 6) converted."""
    if isinstance(v, bytes) and len(v) == 8 * dim:
        return np.frombuffer(v, dtype=np.float64).astype(np.float32).tobytes()
    if not isinstance(v, bytes) or len(v) != 4 * dim:
        raise InvalidInputError("invalid running sum in export")
    return v


def _check_fulltext(con: Any) -> None:
    """FTS5's own check of the index against ``messages`` (raises if they differ). Rows with CJK or
    decomposed text are indexed as :func:`~memsif_lite.fulltext.index_text` rewrites them, which FTS5 cannot know:
    inside a transaction (or savepoint) that is always rolled back, each such row's rewritten entry
    is deleted and its text indexed as written, so the check compares every row (a wrong entry
    leaves a mismatch). The rows are read inside it, so no other writer can change them between."""
    own = con.get_autocommit()
    con.execute("BEGIN IMMEDIATE" if own else "SAVEPOINT fulltext_check")
    try:
        for mid, speaker, text in con.execute("SELECT id, speaker, text FROM messages").fetchall():
            if not (isinstance(speaker, str) and isinstance(text, str)):
                continue  # a damaged row (SQLite's integrity check names it): FTS5's check finds its entry wrong
            if index_text(speaker) != speaker or index_text(text) != text:
                unindex_fulltext(con, mid, speaker, text)
                con.execute("INSERT INTO message_fts(rowid, speaker, text) VALUES(?,?,?)", (mid, speaker, text))
        con.execute("INSERT INTO message_fts(message_fts, rank) VALUES('integrity-check', 1)")
    finally:
        if not con.get_autocommit():  # SQLite may have rolled back already (interrupt, I/O error)
            if own:
                con.execute("ROLLBACK")
            else:
                con.execute("ROLLBACK TO fulltext_check")
                con.execute("RELEASE fulltext_check")


def check_connection(con: Any) -> list[str]:
    """Integrity, full-text index and vec0 consistency problems, in plain words (empty = healthy)."""
    problems: list[str] = []
    res = con.execute("PRAGMA integrity_check").fetchall()
    if res != [("ok",)]:
        problems += [f"SQLite integrity check: {r[0]}" for r in res[:10]]
    try:  # a read-only connection cannot run FTS5's command; integrity_check checks FTS5 too (SQLite >= 3.44)
        if not con.readonly("main"):
            _check_fulltext(con)
    except apsw.Error as e:
        problems.append(f"the full-text index does not match the messages ({e})")
    dim = int(store.read_meta(con)["embedding_dim"])
    for vt, owner in VEC_TABLES.items():
        try:
            chunks = con.execute(f"SELECT chunk_id, size, length(validity), length(rowids) FROM {vt}_chunks").fetchall()
            for cid, size, lv, lr in chunks:
                blob = con.execute(f"SELECT length(vectors) FROM {vt}_vector_chunks00 WHERE rowid=?", (cid,)).fetchone()
                if size <= 0 or lv != (size + 7) // 8 or lr != size * 8 or not blob or blob[0] != size * dim:
                    problems.append(f"vector table {vt}: chunk {cid} has the wrong size")
            n_vec = con.execute(f"SELECT count(*) FROM {vt}_rowids").fetchone()[0]
            n_own = con.execute(f"SELECT count(*) FROM {owner}").fetchone()[0]
            if n_vec != n_own:
                problems.append(f"{owner}: {n_own} rows but {n_vec} vectors")
            missing = con.execute(f"SELECT count(*) FROM {owner} WHERE rowid NOT IN (SELECT rowid FROM {vt}_rowids)"
                                  ).fetchone()[0]
            if missing:
                problems.append(f"{owner}: {missing} rows without a vector")
            bad_chunk = con.execute(f"SELECT count(*) FROM {vt}_rowids WHERE chunk_id NOT IN "
                                    f"(SELECT chunk_id FROM {vt}_chunks)").fetchone()[0]
            if bad_chunk:
                problems.append(f"vector table {vt}: {bad_chunk} vectors point to missing chunks")
        except apsw.Error as e:
            problems.append(f"vector table {vt} is unreadable: {e}")
    orphan_units = con.execute(
        "SELECT count(*) FROM messages WHERE id NOT IN (SELECT message_id FROM message_units) "
        "AND id NOT IN (SELECT message_id FROM work_queue WHERE kind='place')").fetchone()[0]
    if orphan_units:
        problems.append(f"{orphan_units} messages are in no segment")
    fk = con.execute("PRAGMA foreign_key_check").fetchall()
    if fk:
        problems.append(f"{len(fk)} rows reference missing rows (first: {fk[0][0]})")
    problems += malformed_times(con) + malformed_record_times(con)
    problems += malformed_units(con, dim) + trajectory_count_problems(con) + malformed_steps(con)[:20]
    problems += id_problems(con)
    problems += partition_problems(con, dim)
    return problems


def backup(con: Any, dest: str | Path) -> None:
    """``VACUUM INTO`` dest, which must be new or empty (Admin.backup creates it, empty and 0600)."""
    d = Path(dest)
    previous = con.limit(apsw.SQLITE_LIMIT_ATTACHED, 1)  # VACUUM INTO attaches the target
    try:
        con.execute("VACUUM INTO ?", (str(d),))
    except apsw.Error as e:
        raise MemoryFileError(f"backup to {d} failed: {e}") from e
    finally:
        con.limit(apsw.SQLITE_LIMIT_ATTACHED, previous)


def compact(con: Any, path: Path) -> tuple[int, int, int]:
    """Rewrite the file in place, table by table (SQLite's ``VACUUM``): each table's pages, the
    message vectors' among them, then lie together (a file grown message by message has them in
    thousands of pieces between everything else, and a first search after a reboot reads the disk
    between them too), and free pages go back to the disk. One transaction: an error or a crash
    leaves the file as it was. SQLite keeps the rowids of a table with an ``INTEGER PRIMARY KEY``
    or an index and may renumber the others; every rowid table of the schema has one
    (tests/test_compact.py checks the schema and every rowid). SQLite builds the new file in a
    temporary one (``temp_store=FILE`` for the VACUUM alone, not memory: as large as the file;
    encrypted like it under SQLite3 Multiple Ciphers), then writes every page through the ``-wal``;
    both need room, checked first (:func:`_room`). Must run outside a transaction. Returns the
    file's bytes before and after (its pages: what the main file holds once the ``-wal`` is copied
    back) and the bytes of the ``-wal`` left (:func:`~memsif_lite.store.cut_wal`)."""
    if not con.get_autocommit():
        raise InvalidInputError("compact runs outside a transaction (SQLite's VACUUM cannot run inside one)")
    size = _bytes(con)
    _room(path, size - _bytes(con, "freelist_count"))
    temp = int(con.execute("PRAGMA temp_store").fetchone()[0])
    attached = con.limit(apsw.SQLITE_LIMIT_ATTACHED, 1)  # VACUUM attaches the new copy
    try:
        # (changing temp_store drops this connection's TEMP tables: none holds anything between
        # transactions — rewind.py's temp.renumbered is emptied by the transaction that fills it)
        con.execute("PRAGMA temp_store=FILE")
        con.execute("VACUUM")
    finally:
        try:
            con.execute(f"PRAGMA temp_store={temp}")  # never left: other temporary files stay in memory
        finally:
            con.limit(apsw.SQLITE_LIMIT_ATTACHED, attached)
    try:  # the compaction is committed: cutting the -wal back is a nicety, never a failure
        store.cut_wal(con)
    except (StorageError, apsw.Error) as e:  # a writer came first, a full disk...: the -wal stays
        log.info("compact: the -wal was not cut back (%s); it goes when the last connection closes", e)
    wal = Path(f"{path}-wal")
    return size, _bytes(con), wal.stat().st_size if wal.exists() else 0


def _bytes(con: Any, pages: str = "page_count") -> int:
    """The bytes of the file's pages (``page_count``) or of its free ones (``freelist_count``)."""
    return int(con.execute("PRAGMA page_size").fetchone()[0]) * int(con.execute(f"PRAGMA {pages}").fetchone()[0])


def sqlite_temp_dir() -> Path | None:
    """Where SQLite's unix VFS puts temporary files (os_unix.c: the first of ``SQLITE_TMPDIR``,
    ``TMPDIR``, /var/tmp, /usr/tmp, /tmp and the working directory that is a writable folder; SQLite
    reads the two variables once, when it starts: a change after that is not followed by SQLite);
    None elsewhere (Windows: its own temporary folder, not checked here)."""
    if os.name != "posix":
        return None
    for d in (os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR"), "/var/tmp", "/usr/tmp", "/tmp", "."):
        if d and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return Path(d)
    return None


def _room(path: Path, size: int) -> None:
    """StorageFullError, before anything is written, unless the disks have room for a compaction
    that keeps ``size`` bytes (the file's pages in use): that again beside the file (the ``-wal``)
    and in SQLite's temporary folder (the new copy), both on one disk when they are, with a margin
    of a tenth."""
    need: dict[int, tuple[Path, int]] = {}
    for d in (path.resolve().parent, sqlite_temp_dir()):
        if d is None:
            continue
        dev = d.stat().st_dev
        where, n = need.get(dev, (d, 0))
        need[dev] = (where, n + size + size // 10)
    for where, n in need.values():
        free = shutil.disk_usage(where).free
        if free < n:
            raise StorageFullError(f"compacting {path} needs about {n / 1e6:,.0f} MB free in {where} (a copy of the "
                                   f"file and its -wal), and it has {free / 1e6:,.0f} MB; nothing was changed")
