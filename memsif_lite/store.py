"""The memory file: inspection before trust, one `_connect()`, migrations, write transactions.

Opening a file happens in two steps (see ../README.md "Guarantees"):

0. On every connection, an encrypted file's key is set first, before any statement reads the
   file (:func:`_apply_key`: SQLite3 Multiple Ciphers, ChaCha20-Poly1305).
1. *Inspect* it read-only with no extension loaded: it must be SQLite, pass ``quick_check`` (of
   the whole file up to :data:`FULL_CHECK_MAX_BYTES`; of its schema table beyond, where reading
   every page would cost seconds at each open: ``memsif check`` reads them all),
   carry our ``application_id``, a ``user_version`` we know, and exactly the schema objects our
   migrations create (so no foreign table, trigger or view rides along), plus at most the two
   tables Litestream adds to a file it replicates (:data:`REPLICATION_TABLES`, exact shape).
2. *Connect* for real: defensive mode, untrusted schema, triggers and views disabled, sqlite-vec
   loaded and extension loading switched off again, WAL, ``synchronous`` (FULL by default),
   ``busy_timeout``, foreign keys; then apply pending migrations, each in one transaction: its
   ``sql/NNNN_name.sql``, then its Python data step if :data:`DATA_STEPS` has one (schema 6:
   per-vector int8 scales and float64 → float32 sums cannot be computed in SQL).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, TypeVar

import apsw
import numpy as np
import sqlite_vec

from .errors import (
    ConfigError,
    EmbeddingMismatchError,
    EncryptedFileError,
    MemoryFileError,
    NotAMemoryFileError,
    NotEncryptedError,
    SchemaVersionError,
    StorageBusyError,
    StorageCorruptError,
    StorageError,
    StorageFullError,
)
from .int8 import quantize
from .keys import Key

__all__ = ["APPLICATION_ID", "FileInfo", "QuietReads", "inspect", "quiet_stamp", "connect", "write", "map_errors",
           "migrations", "expected_schema", "REPLICATION_TABLES", "read_meta", "set_meta", "check_embedding",
           "require_cipher", "convert"]

log = logging.getLogger("memsif_lite")
T = TypeVar("T")

#: ``PRAGMA application_id`` of every memsif file: the bytes "MSIF".
APPLICATION_ID = 0x4D534946
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_SQLITE_MAGIC = b"SQLite format 3\x00"


SchemaPart = Literal["clusters", "utc_offsets", "int8_vectors", "tombstones", "change_log", "change_uids",
                     "record_time"]
#: the schema version that added each part a reader of an older file must know about
_SCHEMA_PARTS: dict[str, int] = {"clusters": 3, "utc_offsets": 5, "int8_vectors": 6, "tombstones": 7, "change_log": 11,
                                 "change_uids": 12, "record_time": 13}


@dataclass(frozen=True)
class FileInfo:
    """What inspection learnt about an existing file."""

    user_version: int
    meta: dict[str, str]

    def holds(self, part: SchemaPart) -> bool:
        """Whether the file's schema has ``part`` (a file of an older schema is read as it is, e.g.
        to merge it): ActiveFact clusters, each message's UTC offset, message vectors stored as
        int8 codes (float32 before), the hashes of forgotten messages, the change log, its uids,
        each message's record time (``known_at``)."""
        return self.user_version >= _SCHEMA_PARTS[part]


def _sql(con: apsw.Connection, sql: str, args: Any = ()) -> Any:
    """``con.execute`` with rows typed loosely (they are checked value by value where read)."""
    return con.execute(sql, args)


def _sql_dir():
    try:
        d = resources.files("memsif_lite.sql")
        if d.is_dir():
            return d
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent / "sql"  # a source checkout


@functools.lru_cache(maxsize=1)
def migrations() -> tuple[tuple[int, str], ...]:
    """(version, sql) for every packaged migration, in order; versions are 1, 2, 3, ..."""
    steps = []
    for entry in _sql_dir().iterdir():
        m = _MIGRATION_NAME.match(entry.name)
        if m:
            steps.append((int(m.group(1)), entry.read_text(encoding="utf-8")))
    steps.sort()
    if [v for v, _ in steps] != list(range(1, len(steps) + 1)):
        raise RuntimeError(f"migrations are not numbered 1..n: {[v for v, _ in steps]}")
    return tuple(steps)


def latest_version() -> int:
    return len(migrations())


def schema_version(con: apsw.Connection) -> int:
    """The schema version of an open file (older than :func:`latest_version` while a file opened
    read-only was never opened for writing by this version)."""
    return int(_sql(con, "PRAGMA user_version").fetchone()[0])


def _load_vec(con: apsw.Connection) -> None:
    con.enable_load_extension(True)
    try:
        con.load_extension(sqlite_vec.loadable_path())
    finally:
        con.enable_load_extension(False)


def require_cipher() -> None:
    """A key needs SQLite3 Multiple Ciphers (the ``apsw-sqlite3mc`` build of apsw, memsif's
    dependency); a plain ``apsw`` installed over it (both provide the module ``apsw``) cannot encrypt."""
    if not hasattr(apsw, "mc_version"):
        raise ConfigError(
            "this apsw cannot encrypt (it is not the apsw-sqlite3mc build memsif_lite depends on; another "
            "package's plain apsw replaced it): pip install --force-reinstall --no-deps apsw-sqlite3mc")


def _apply_key(con: apsw.Connection, key: Key | None) -> None:
    """Key a new connection: the first statements it runs, before anything reads the file. The
    cipher is named, not left to the build's default, so every build reads the file the same way.
    Errors never carry the statement (it holds the key)."""
    if key is None:
        return
    require_cipher()
    keyed = False
    try:
        _sql(con, "PRAGMA cipher='chacha20'").fetchall()
        _sql(con, f"PRAGMA hexkey='{key.sql_hex()}'").fetchall()
        keyed = True
    except apsw.Error:
        pass  # raised below, outside this block: not even the exception's context keeps the statement
    if not keyed:
        raise MemoryFileError("cannot set the encryption key: the SQLite VFS in use does not encrypt "
                              f"({con.vfsname('main') or 'unknown VFS'})")


def _looks_encrypted(head: bytes) -> bool:
    """Whether a file that does not start as SQLite does looks like one SQLite3 Multiple Ciphers
    encrypted with ``chacha20``: that cipher leaves header bytes 16-23 readable (page size,
    format versions, reserved bytes, and the fixed payload fractions 64, 32, 32)."""
    if len(head) < 24:
        return False
    size = int.from_bytes(head[16:18], "big")
    size = 65536 if size == 1 else size
    return head[21:24] == b"\x40\x20\x20" and 512 <= size <= 65536 and size & (size - 1) == 0


#: each connection's page cache, KiB (SQLite's default is 2,000: 2 MB); it only grows as pages are
#: read. A BM25 query looks up the length of every row it scores (``message_fts_docsize``, 11 bytes
#: a message): at a million messages a 2 MB cache sent most of those lookups to the operating system
#: and BM25 took 28-32 ms p50 where 16-128 MiB took 21-26 (benchmarks/README.md,
#: "Search at 1M: the page cache and a float32 first pass").
PAGE_CACHE_KIB = 32768


def _harden(con: apsw.Connection) -> None:
    con.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, 1)
    con.config(apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0)
    con.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
    con.config(apsw.SQLITE_DBCONFIG_ENABLE_VIEW, 0)
    con.limit(apsw.SQLITE_LIMIT_ATTACHED, 0)
    # temporary tables and indexes stay in memory: never a temporary file (unencrypted) on disk
    _sql(con, "PRAGMA cell_size_check=ON; PRAGMA mmap_size=0; PRAGMA trusted_schema=OFF; PRAGMA temp_store=MEMORY")


@functools.lru_cache(maxsize=16)
def expected_schema(version: int, dim: int) -> frozenset[tuple[str, str, str, str]]:
    """The exact sqlite_schema rows our migrations 1..version create for dimension ``dim``."""
    con = apsw.Connection(":memory:")
    _load_vec(con)
    for v, sql in migrations()[:version]:
        _apply(con, v, sql, dim)
    rows = _sql(con, "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema").fetchall()
    con.close()
    return frozenset((t, n, tb, _norm_sql(s)) for t, n, tb, s in rows)


#: sqlite_schema rows another program adds to a memory file, recognised by exact name and shape
#: (type, name, table and SQL) and left alone; anything else not created by our migrations is refused.
#: Litestream (0.3.x and 0.5.x, https://litestream.io) creates these two tables the first time it
#: replicates a file: ``_litestream_seq`` forces a WAL write when it syncs, ``_litestream_lock`` is
#: written in a transaction it always rolls back, to take the write lock. memsif never reads them.
REPLICATION_TABLES: frozenset[tuple[str, str, str, str]] = frozenset({
    ("table", "_litestream_seq", "_litestream_seq",
     "CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER)"),
    ("table", "_litestream_lock", "_litestream_lock", "CREATE TABLE _litestream_lock (id INTEGER)"),
})


def _norm_sql(sql: str) -> str:
    return " ".join(sql.split())


def _render(sql: str, dim: int) -> str:
    return sql.replace("{dim}", str(int(dim)))


def _apply(con: apsw.Connection, version: int, sql: str, dim: int) -> None:
    """One migration: its SQL, then its data step if it has one (same transaction)."""
    _sql(con, _render(sql, dim))
    step = DATA_STEPS.get(version)
    if step is not None:
        step(con, dim)


def _int8_vectors(con: apsw.Connection, dim: int) -> None:
    """Data step of migration 5 (SQL cannot compute per-vector scales or decode float64 sums):
    quantise the stashed float32 vectors into the int8 tables, float64 running sums → float32,
    count each message's tokens once, drop the stash."""
    rows = _sql(con, "SELECT tbl, id, v FROM _v5_stash").fetchall()
    for tbl, rid, blob in rows:
        if tbl not in ("message_vec", "segment_vec", "trajectory_vec", "fact_vec", "active_fact_vec"):
            raise MemoryFileError(f"unexpected vector table {tbl!r} during migration")
        code = quantize(np.frombuffer(blob, dtype=np.float32)).tobytes()
        _sql(con, f"INSERT INTO {tbl}(rowid, embedding) VALUES(?, vec_int8(?))", (rid, code))
    for table in ("segments", "trajectories"):
        for rid, blob in _sql(con, f"SELECT id, vec_sum FROM {table}").fetchall():
            if len(blob) == 8 * dim:
                _sql(con, f"UPDATE {table} SET vec_sum=? WHERE id=?",
                     (np.frombuffer(blob, dtype=np.float64).astype(np.float32).tobytes(), rid))
    texts = _sql(con, "SELECT id, text FROM messages WHERE tokens IS NULL").fetchall()
    if texts:
        from .tokens import count_tokens

        for rid, text in texts:
            _sql(con, "UPDATE messages SET tokens=? WHERE id=?", (count_tokens(text), rid))
    _sql(con, "DROP TABLE _v5_stash")


def _fulltext_scripts(con: apsw.Connection, dim: int) -> None:
    """Data step of migration 8: messages with CJK text are indexed again, as schema 8 rewrote them
    (:func:`memsif_lite.fulltext.cjk_grams`; their entries so far hold the text as written), and
    messages with non-ASCII text are counted again (a run of characters the counting vocabulary does
    not know now counts one token per character, not one)."""
    from .fulltext import cjk_grams, has_cjk
    from .tokens import count_tokens

    for mid, speaker, text in _sql(con, "SELECT id, speaker, text FROM messages").fetchall():
        if not text.isascii():
            n = count_tokens(text)
            _sql(con, "UPDATE messages SET tokens=? WHERE id=? AND tokens IS NOT ?", (n, mid, n))
        if has_cjk(speaker) or has_cjk(text):  # schema 8's rewrite: migration 9 composes after it
            _reindex(con, mid, (speaker, text), (cjk_grams(speaker), cjk_grams(text)))


def _fulltext_nfc(con: apsw.Connection, dim: int) -> None:
    """Data step of migration 9: messages written decomposed (not NFC) are indexed again, composed
    (:func:`memsif_lite.fulltext.index_text`); their entries so far hold schema 8's rewrite of the
    text as written (:func:`~memsif_lite.fulltext.cjk_grams`). ``messages.text`` keeps what was written."""
    from .fulltext import cjk_grams, compose, index_text

    for mid, speaker, text in _sql(con, "SELECT id, speaker, text FROM messages").fetchall():
        if compose(speaker) != speaker or compose(text) != text:
            _reindex(con, mid, (cjk_grams(speaker), cjk_grams(text)), (index_text(speaker), index_text(text)))


def _reindex(con: apsw.Connection, mid: int, old: tuple[str, str], new: tuple[str, str]) -> None:
    """Replace a message's full-text entry (FTS5's delete needs the values it was indexed with)."""
    _sql(con, "INSERT INTO message_fts(message_fts, rowid, speaker, text) VALUES('delete', ?, ?, ?)", (mid, *old))
    _sql(con, "INSERT INTO message_fts(rowid, speaker, text) VALUES(?,?,?)", (mid, *new))


def change_uid(cid: int, at: str, actor: str, op: str, ids: str, decision: str | None) -> int:
    """The uid of a change logged before schema 12: a hash of what it recorded (64 bits), the same
    in every copy of the file (a backup made before the upgrade, upgraded on its own, names it alike)."""
    material = json.dumps([cid, at, actor, op, ids, decision], ensure_ascii=False)
    return int.from_bytes(hashlib.sha256(material.encode("utf-8")).digest()[:8], "big", signed=True)


def _change_uids(con: apsw.Connection, dim: int) -> None:
    """Data step of migration 12: the rows of the change log so far get their uid."""
    for cid, at, actor, op, ids, decision in _sql(
            con, "SELECT id, at, actor, op, ids, decision FROM change_log WHERE uid IS NULL").fetchall():
        _sql(con, "UPDATE change_log SET uid=? WHERE id=?", (change_uid(cid, at, actor, op, ids, decision), cid))


def _packed_images(con: apsw.Connection, dim: int) -> None:
    """Data step of migration 16: every change's before images, JSON text in ``before`` so far, are
    packed into ``images`` (:func:`memsif_lite.db.rewind.pack`); ``before`` goes. Text that is not
    JSON held no images a read could use (it was skipped): it is not kept."""
    from .db.rewind import pack

    def packed(*values: Any) -> Any:
        text = values[0]
        try:
            return pack(json.loads(text)) if isinstance(text, str) else None
        except (ValueError, RecursionError):
            return None

    con.create_scalar_function("memsif_pack_images", packed, 1, deterministic=True)
    _sql(con, "UPDATE change_log SET images = memsif_pack_images(before) WHERE before IS NOT NULL")
    _sql(con, "ALTER TABLE change_log DROP COLUMN before")


#: migrations whose data change needs Python after their SQL (run in the same transaction,
#: also when the expected schema is built, so the schema check sees their DDL too)
DATA_STEPS: dict[int, Any] = {6: _int8_vectors, 8: _fulltext_scripts, 9: _fulltext_nfc, 12: _change_uids,
                              16: _packed_images}


#: the largest file whose every page ``inspect`` reads (``PRAGMA quick_check``) at each open:
#: about 180,000 messages, a quarter of a second. A larger file is checked whole by ``memsif
#: check``; at open, its schema table is, and a page found damaged later, when read, is a
#: :class:`StorageCorruptError` (``cell_size_check``), never a crash. At 1M messages (1.8 GB)
#: the full check took 1.6 s CPU with the file in the page cache and 5 s (21 s wall) from disk.
FULL_CHECK_MAX_BYTES = 256 * 2**20


def inspect(path: str | Path, *, key: Key | None = None) -> FileInfo | None:
    """Check an existing file without trusting it. Returns None for a new (absent or empty) file.
    An encrypted file is read with ``key``: none or a wrong one is an :class:`EncryptedFileError`,
    and a key for a file that is not encrypted a :class:`NotEncryptedError`.

    Raises a :class:`MemoryFileError` subclass and never modifies the file.
    """
    p = Path(path)
    if not p.exists() or (p.is_file() and p.stat().st_size == 0 and not Path(f"{p}-wal").exists()):
        return None
    if not p.is_file():
        raise NotAMemoryFileError(f"{p} is not a regular file")
    try:
        with open(p, "rb") as fh:
            head = fh.read(100)
    except OSError as e:
        raise MemoryFileError(f"cannot read {p}: {e}") from e
    plain = head.startswith(_SQLITE_MAGIC)
    if key is None and not plain:
        if _looks_encrypted(head):
            raise EncryptedFileError(f"{p}: this memory file is encrypted: give its key", key_given=False)
        raise NotAMemoryFileError(f"{p} is not an SQLite database (and so not a memsif memory file)")
    if key is not None and plain:
        raise NotEncryptedError(f"{p} is not encrypted, so it is not opened with a key (open it without one, "
                                "or encrypt it first: `memsif encrypt`)")
    # without a -wal file the main file is all there is: read it immutable so that not even
    # empty -wal/-shm side files are created next to a file we may refuse. Immutable reads take
    # no lock: if the file changed while it was read (another process just opened and migrated
    # it), a refusal is not trusted and the file is read once more.
    stamp = _stamp(p)
    try:
        return _inspect_sqlite(p, key)
    except MemoryFileError:
        if _stamp(p) == stamp:
            raise
        return _inspect_sqlite(p, key)


def _bytes_on_disk(p: Path) -> int:
    """A file's size; 0 when it is gone (a -wal the last connection of another process removes)."""
    try:
        return p.stat().st_size
    except FileNotFoundError:
        return 0


def _stamp(p: Path) -> tuple[int, int, bool]:
    st = p.stat()
    return st.st_size, st.st_mtime_ns, Path(f"{p}-wal").exists()


def _inspect_sqlite(p: Path, key: Key | None) -> FileInfo | None:
    has_wal = Path(f"{p}-wal").exists()
    uri = "file:" + _uri_path(p) + ("?mode=ro" if has_wal else "?mode=ro&immutable=1")
    try:
        con = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    except apsw.Error as e:
        raise NotAMemoryFileError(f"cannot open {p} as SQLite: {e}") from e
    try:
        _apply_key(con, key)
        _harden(con)
        # another process opening or closing the file may hold its wal-index a moment (recovery, the
        # last connection's checkpoint): wait as a writer would, not fail with "database is locked"
        con.setbusytimeout(10_000)
        meta_rows: list[Any] | BaseException
        try:
            # one read transaction: another process may be migrating the file right now, and its
            # version and schema must be read from the same snapshot
            _sql(con, "BEGIN")
            try:
                # a large -wal left by a kill -9 holds pages the check reads too
                whole = _bytes_on_disk(p) + _bytes_on_disk(Path(f"{p}-wal")) <= FULL_CHECK_MAX_BYTES
                ok = _sql(con, "PRAGMA quick_check" if whole else "PRAGMA quick_check(sqlite_schema)").fetchall()
                app_id = _sql(con, "PRAGMA application_id").fetchone()[0]
                version = _sql(con, "PRAGMA user_version").fetchone()[0]
                rows = _sql(con, "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema").fetchall()
                try:
                    meta_rows = _sql(con, "SELECT key, value FROM meta").fetchall()
                except apsw.SQLError as e:  # no meta table: judged below, after the version checks
                    meta_rows = e
            except BaseException:
                if not con.get_autocommit():  # (an I/O error may have ended it already)
                    with contextlib.suppress(apsw.Error):
                        _sql(con, "ROLLBACK")
                raise
            _sql(con, "COMMIT")
        except apsw.NotADBError as e:
            if key is not None:  # the key does not decrypt the first page
                raise EncryptedFileError(f"{p}: this memory file is encrypted and the key given does not open it "
                                         "(or it is not a memsif memory file)", key_given=True) from None
            raise NotAMemoryFileError(f"{p} is not a readable SQLite database: {e}") from e
        except apsw.CorruptError as e:
            raise NotAMemoryFileError(f"{p} is not a readable SQLite database: {e}") from e
        except apsw.Error as e:
            raise MemoryFileError(f"cannot inspect {p}: {e}") from e
        if app_id == 0 and version == 0 and not rows:
            return None  # an empty SQLite file: ours to initialise
        if app_id != APPLICATION_ID:
            raise NotAMemoryFileError(
                f"{p} is an SQLite database but not a memsif memory file (application_id {app_id:#x})"
            )
        if ok != [("ok",)]:
            raise MemoryFileError(f"{p} failed SQLite's quick_check: {ok[:3]}")
        if version > latest_version():
            raise SchemaVersionError(
                f"{p} has schema version {version}, newer than this memsif_lite understands "
                f"({latest_version()}); upgrade memsif_lite to open it"
            )
        if version < 1:
            raise MemoryFileError(f"{p} carries the memsif application id but no schema")
        try:
            if isinstance(meta_rows, BaseException):
                raise meta_rows
            meta = dict(meta_rows)
            dim = int(meta["embedding_dim"])
        except (apsw.Error, KeyError, ValueError, TypeError) as e:
            raise MemoryFileError(f"{p} has no valid meta table: {e}") from e
        if not 1 <= dim <= 8192:
            raise MemoryFileError(f"{p} records an impossible embedding dimension {dim}")
        found = frozenset((t, n, tb, _norm_sql(s)) for t, n, tb, s in rows) - REPLICATION_TABLES
        expected = expected_schema(version, dim)
        if found != expected:
            extra = sorted(f"{t} {n}" for t, n, _, _ in found - expected)
            missing = sorted(f"{t} {n}" for t, n, _, _ in expected - found)
            raise MemoryFileError(
                f"{p} has a schema memsif_lite did not create; refusing it "
                f"(unexpected: {', '.join(extra) or 'none'}; missing or altered: {', '.join(missing) or 'none'})"
            )
        return FileInfo(user_version=version, meta=meta)
    finally:
        con.close()


def _uri_path(p: Path) -> str:
    from urllib.parse import quote

    return quote(str(p.resolve()))


#: apsw exception types and the documented error each becomes (first match wins)
_ERROR_MAP: tuple[tuple[type[BaseException], type[StorageError]], ...] = (
    (apsw.BusyError, StorageBusyError),
    (apsw.LockedError, StorageBusyError),
    (apsw.FullError, StorageFullError),
    (apsw.CorruptError, StorageCorruptError),
    (apsw.NotADBError, StorageCorruptError),
    (apsw.ReadOnlyError, StorageError),
)


@contextlib.contextmanager
def map_errors() -> Iterator[None]:
    """The one choke point where SQLite's exceptions become memsif_lite's: an ``apsw.Error``
    raised inside becomes a :class:`StorageError` subclass (busy, full, corrupt, or the base
    class), with the original chained as ``__cause__``. Our own errors pass through."""
    try:
        yield
    except apsw.Error as e:
        for src, dst in _ERROR_MAP:
            if isinstance(e, src):
                raise dst(_describe(dst, e)) from e
        raise StorageError(f"SQLite error: {e}") from e


def _describe(kind: type[StorageError], e: BaseException) -> str:
    if isinstance(e, apsw.ReadOnlyError):  # the file, its folder or its -wal/-shm: not writable by this user
        return (f"the memory file cannot be written ({e}): it, its folder or the -wal/-shm files beside it are "
                "read-only for this user; fix their permissions (to read the file only: Memory(..., read_only=True))")
    if kind is StorageBusyError:
        return f"the memory file is locked by another process (waited past busy_timeout_ms): {e}"
    if kind is StorageFullError:
        return f"the disk is full; nothing of this write was kept: {e}"
    return f"the memory file is damaged ({e}); run `memsif check` and restore a backup"


def quiet_stamp(path: str | Path) -> tuple[int, int, int, int] | None:
    """The main file's identity and last change while no connection has the file open, else None.

    An open WAL connection always has a ``-wal`` file beside the database (SQLite creates it on
    the first read and removes it when the last connection closes), and a rollback-journal write
    a ``-journal``. Without either, no one else is reading or writing, and a reader may read the
    file as immutable, which creates no ``-wal`` or ``-shm`` (:class:`QuietReads`)."""
    p = Path(path)
    try:
        if any(Path(f"{p}{side}").exists() for side in ("-wal", "-journal")):
            return None
        st = p.stat()
        if any(Path(f"{p}{side}").exists() for side in ("-wal", "-journal")):  # opened meanwhile
            return None
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class QuietReads:
    """Reading a file no one else has open without writing a byte beside it (read-only opens).

    The connection is opened ``immutable`` (no locks, no ``-wal`` / ``-shm``) when
    :func:`quiet_stamp` says no other connection has the file open. Immutable reads do not see
    another process's changes, so every read checks the stamp before and after it: if another
    connection opened the file meanwhile (its ``-wal`` appears) or changed it (size, time,
    inode), the read's result is not trusted and :meth:`still_quiet` says so; the caller then
    reopens the file the shared way (:func:`connect` without ``immutable``; SQLite then needs
    the ``-shm`` wal-index to coordinate with that writer, and reads are exact again)."""

    def __init__(self, path: Path, stamp: tuple[int, int, int, int] | None):
        # the real file: SQLite puts a writer's -wal beside it, not beside a symbolic link to it,
        # and a later chdir must not make the path name another file
        self.path, self.stamp = Path(path).resolve(), stamp

    @property
    def immutable(self) -> bool:
        return self.stamp is not None

    def still_quiet(self) -> bool:
        return self.stamp is not None and quiet_stamp(self.path) == self.stamp

    @classmethod
    def now(cls, path: Path) -> "QuietReads":
        return cls(path, quiet_stamp(Path(path).resolve()))

    def read(self, once: Callable[[], T], share: Callable[[], None], undo: Callable[[], None] | None = None) -> T:
        """``once()``, trusted only if the file stayed quiet around it; else ``undo()`` what that
        untrusted ``once()`` wrote (an export, a backup), ``share()`` (reopen the shared way) and
        ``once()`` again. A storage error while the file changed is retried too (an immutable read
        may meet a page a writer's checkpoint was rewriting)."""
        if self.immutable:
            try:
                if self.still_quiet():
                    result = once()
                    if self.still_quiet():
                        return result
                    if undo is not None:
                        undo()
            except (StorageError, apsw.Error):
                if self.still_quiet():
                    raise
            share()
        return once()


def _create_private(path: Path) -> bool:
    """A new memory file is created 0600 whatever the umask (SQLite gives its ``-wal`` and ``-shm``
    the main file's mode); never through a symbolic link whose target does not exist. Returns
    whether this call created it."""
    if path.is_symlink() and not path.exists():
        raise MemoryFileError(f"{path} is a symbolic link to a file that does not exist; refusing to create it")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return False  # made by another process just now (or an existing file): SQLite opens it as it is
    except OSError as e:
        raise MemoryFileError(f"cannot create {path}: {e.strerror or e}") from e
    os.close(fd)
    return True


def connect(
    path: str | Path,
    *,
    dim: int,
    synchronous: str = "FULL",
    busy_timeout_ms: int = 10_000,
    readonly: bool = False,
    immutable: bool = False,
    initial_meta: dict[str, str] | None = None,
    key: Key | None = None,
) -> apsw.Connection:
    """Open ``path`` (already inspected) with every setting memsif relies on. A new file gets
    its schema and ``initial_meta`` in the same first transaction, so no other process can
    ever see a schema without its meta. ``immutable`` (read-only only): read the file as it is,
    with no lock and no side file (see :class:`QuietReads` for when that is right). ``key``: the
    file is encrypted with it (a new file is created encrypted)."""
    if key is not None:
        require_cipher()  # before a new file is created
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    name = str(path)
    created = False
    if readonly and immutable:
        flags |= apsw.SQLITE_OPEN_URI
        name = "file:" + _uri_path(Path(path)) + "?mode=ro&immutable=1"
    elif not readonly and not Path(path).exists():
        created = _create_private(Path(path))
    try:
        con = apsw.Connection(name, flags=flags)
    except apsw.Error as e:
        raise MemoryFileError(f"cannot open {path}: {e}") from e
    if not readonly and con.readonly("main"):  # SQLite opened it read-only: this user cannot write it
        con.close()
        raise MemoryFileError(f"cannot open {path} for writing: the file is read-only for this user (its "
                              "permissions, an immutable attribute or a read-only disk); open it read-only "
                              "(Memory(..., read_only=True); memsif's reading commands do) to read it")
    try:
        try:
            _apply_key(con, key)
        except MemoryFileError:  # a key this SQLite cannot apply: the empty file made for it goes again
            con.close()
            if created and Path(path).stat().st_size == 0:
                Path(path).unlink()
            raise
        _harden(con)
        _load_vec(con)
        con.setbusytimeout(busy_timeout_ms)
        if not readonly:
            mode = _to_wal(con, busy_timeout_ms)
            if str(mode).lower() != "wal":
                log.warning("could not switch %s to WAL (journal_mode=%s)", path, mode)
        _sql(con, f"PRAGMA synchronous={synchronous}")
        _sql(con, "PRAGMA foreign_keys=ON")
        _sql(con, f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
        if not readonly:
            _migrate(con, dim, initial_meta or {})
    except apsw.Error as e:
        con.close()
        raise MemoryFileError(f"cannot open {path}: {e}") from e
    except BaseException:
        con.close()
        raise
    return con


def _to_wal(con: apsw.Connection, busy_timeout_ms: int) -> str:
    """``PRAGMA journal_mode=WAL``, retried: while another process is creating the same file, SQLite
    can answer it with SQLITE_BUSY without calling the busy handler (1 in ~60 tries with four
    processes, tests/test_cli_surprises.py::test_processes_creating_the_same_new_file_...)."""
    deadline = time.monotonic() + busy_timeout_ms / 1000.0
    delay = 0.005
    while True:
        try:
            return str(_sql(con, "PRAGMA journal_mode=WAL").fetchone()[0])
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def _migrate(con: apsw.Connection, dim: int, initial_meta: dict[str, str]) -> None:
    current = _sql(con, "PRAGMA user_version").fetchone()[0]
    for version, sql in migrations()[current:]:
        with write(con):
            # re-read inside the write lock: another process may have migrated meanwhile
            if _sql(con, "PRAGMA user_version").fetchone()[0] >= version:
                continue
            _apply(con, version, sql, dim)
            if version == 1:
                _sql(con, f"PRAGMA application_id={APPLICATION_ID}")
                set_meta(con, **initial_meta)
            _sql(con, f"PRAGMA user_version={version}")
        log.info("migrated memory file to schema version %d", version)


@contextlib.contextmanager
def write(con: apsw.Connection, *, retries: int = 5) -> Iterator[apsw.Connection]:
    """One write transaction: ``BEGIN IMMEDIATE`` (so the lock is taken up front), commit on
    success, roll back on any exception, and surface the original error even when SQLite
    already rolled back by itself (I/O error, disk full). SQLite errors leave as
    :class:`StorageError` subclasses (:func:`map_errors`)."""
    with map_errors():
        for attempt in range(retries + 1):
            try:
                _sql(con, "BEGIN IMMEDIATE")
                break
            except apsw.BusyError:
                if attempt == retries:
                    raise
                time.sleep(0.05 * (2**attempt))
        try:
            yield con
        except BaseException:
            if not con.get_autocommit():
                _sql(con, "ROLLBACK")
            raise
        else:
            try:
                _sql(con, "COMMIT")
            except BaseException:
                if not con.get_autocommit():
                    _sql(con, "ROLLBACK")
                raise


def cut_wal(con: apsw.Connection) -> None:
    """Cut the ``-wal`` back after a write that grew it (SQLite keeps the file at its largest): a
    PASSIVE checkpoint (it copies back what no reader still needs and never waits: the automatic
    ones only run past 1,000 pages), then a write of the header alone (the ``user_version`` it
    holds) with ``journal_size_limit`` 0 for it, which starts the ``-wal`` over cut to that write's
    frame — when every frame was copied back; while another connection reads an older snapshot
    (Litestream's permanent one, a background worker's) the ``-wal`` stays until SQLite starts it
    over or the last connection closes. Raises StorageBusyError when a writer holds the lock past
    the busy timeout (tried once: nothing waits on this for long)."""
    _sql(con, "PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    limit = _sql(con, "PRAGMA journal_size_limit").fetchone()[0]
    _sql(con, "PRAGMA journal_size_limit=0")
    try:
        with write(con, retries=0):
            version = _sql(con, "PRAGMA user_version").fetchone()[0]
            _sql(con, f"PRAGMA user_version={int(version)}")  # the same value
    finally:
        _sql(con, f"PRAGMA journal_size_limit={int(limit)}")


def read_meta(con: apsw.Connection) -> dict[str, str]:
    return dict(_sql(con, "SELECT key, value FROM meta").fetchall())


def set_meta(con: apsw.Connection, **values: object) -> None:
    for k, v in values.items():
        _sql(con,
            "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (k, v if isinstance(v, str) else json.dumps(v)),
        )


def check_embedding(meta: dict[str, str], model_id: str, dim: int, metric: str, path: object) -> None:
    """Refuse a file whose vectors came from another embedder."""
    want = {"embedding_model": model_id, "embedding_dim": str(dim), "embedding_metric": metric}
    got = {k: meta.get(k) for k in want}
    if got != want:
        raise EmbeddingMismatchError(
            f"{path} was written with embedding model {got['embedding_model']!r} "
            f"(dim {got['embedding_dim']}, {got['embedding_metric']}), but this Memory uses "
            f"{model_id!r} (dim {dim}, {metric}); open it with the same embedding model"
        )


def convert(path: str | Path, *, key: Key | None, new_key: Key | None) -> None:
    """Encrypt, decrypt or re-key a memory file in place: ``key`` opens it now (None: it is plain),
    ``new_key`` opens it afterwards (None: plain). Crash-safe: a copy is written beside it
    (``VACUUM INTO``, 0600), verified (it opens with ``new_key``, passes inspection and holds as
    many rows in every table), synced, and renamed over the file; until the rename the file is as
    it was. Refused while another connection has the file open (its ``-wal`` is there)."""
    p = Path(path).resolve()  # a symbolic link keeps pointing at the converted file
    if inspect(p, key=key) is None:
        raise MemoryFileError(f"no memory file at {p}")
    if Path(f"{p}-wal").exists():  # fold what a crashed writer left; a live one keeps its -wal
        con = apsw.Connection(str(p), flags=apsw.SQLITE_OPEN_READWRITE)
        try:
            _apply_key(con, key)
            with map_errors():
                _sql(con, "PRAGMA user_version").fetchall()
        finally:
            con.close()
    stamp = quiet_stamp(p)
    if stamp is None:
        raise MemoryFileError(f"{p} is open in another program (its -wal file is there): close it and try again")
    left = re.compile(rf"\.{re.escape(p.name)}\.[A-Za-z0-9_]{{8}}\.converting(-journal|-wal|-shm)?")
    for old in p.parent.iterdir():  # copies (and their side files) a conversion killed before its rename left
        if left.fullmatch(old.name) and old.is_file() and not old.is_symlink():
            old.unlink(missing_ok=True)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".converting", dir=p.parent)  # 0600
    except OSError as e:
        raise MemoryFileError(f"cannot write the converted copy beside {p}: {e.strerror or e}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        before = _copy_with_key(p, tmp, key, new_key)
        after = _table_counts(tmp, new_key)
        if after != before:
            raise MemoryFileError(f"the converted copy of {p} does not hold what the file does; nothing was changed")
        _fsync(tmp)
        if quiet_stamp(p) != stamp:
            raise MemoryFileError(f"{p} was opened or changed while it was converted; nothing was changed, "
                                  "try again when no other program has it open")
        os.replace(tmp, p)
        _fsync(p.parent)
    finally:
        for side in ("", "-journal", "-wal", "-shm"):
            Path(f"{tmp}{side}").unlink(missing_ok=True)


def _copy_with_key(src: Path, dest: Path, key: Key | None, new_key: Key | None) -> dict[str, int]:
    """``VACUUM INTO`` the (empty) file ``dest``, encrypted with ``new_key`` (or plain), from a
    read of ``src`` that writes nothing beside it; returns ``src``'s row counts."""
    con = _open_immutable(src, key)
    try:
        counts = _counts(con)
        target = "file:" + _uri_path(dest) + (f"?cipher=chacha20&hexkey={new_key.sql_hex()}" if new_key else "?key=")
        con.limit(apsw.SQLITE_LIMIT_ATTACHED, 1)  # VACUUM INTO attaches its target
        failed = None
        try:
            _sql(con, "VACUUM INTO ?", (target,))
        except apsw.Error as e:  # SQLite names the target (and so the key) in some messages: only its kind
            failed = type(e).__name__
        del target
        if failed is not None:
            raise MemoryFileError(f"could not write the converted copy of {src}: {failed}")
    finally:
        con.close()
    if inspect(dest, key=new_key) is None:
        raise MemoryFileError(f"the converted copy of {src} is empty; nothing was changed")
    return counts


def _open_immutable(p: Path, key: Key | None) -> apsw.Connection:
    con = apsw.Connection("file:" + _uri_path(p) + "?mode=ro&immutable=1",
                          flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        _apply_key(con, key)
        _harden(con)
    except BaseException:
        con.close()
        raise
    return con


def _table_counts(p: Path, key: Key | None) -> dict[str, int]:
    con = _open_immutable(p, key)
    try:
        return _counts(con)
    finally:
        con.close()


def _counts(con: apsw.Connection) -> dict[str, int]:
    """Rows in every ordinary table (the vec0 and FTS5 shadow tables included) of an inspected file."""
    with map_errors():
        names = [n for (n,) in _sql(con, "SELECT name FROM sqlite_schema WHERE type='table' "
                                          "AND sql NOT LIKE 'CREATE VIRTUAL TABLE%'")]
        return {n: _sql(con, f'SELECT count(*) FROM "{n.replace(chr(34), chr(34) * 2)}"').fetchone()[0]
                for n in names}


def _fsync(p: Path) -> None:
    """Flush a file, or a directory's entries (where the platform allows opening one)."""
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
