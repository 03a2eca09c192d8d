"""meta, llm_calls and whole-file operations (counts, export/import, check, backup, compact).

memsif never checkpoints the WAL itself but once at the end of ``compact``, PASSIVE, as SQLite's
automatic checkpoints are (they never wait for a reader nor block a writer); a TRUNCATE or RESTART
checkpoint would wait, holding the write lock, for Litestream's permanent read transaction
(docs/beyond-one-machine.md "Checkpoints")."""

from __future__ import annotations

import base64
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from .. import store
from ..checks import INT64_MAX
from ..errors import InvalidInputError
from ..timeutil import is_stored
from ..types import CompactReport
from .base import Table
from .changes import ChangeLog
from .items import stored_item_problem
from .maintenance import backup, check_connection, compact, export_rows, import_rows, read_export
from .messages import CONTENT_KEY, ID_HIGH, ID_LIMIT, retire_id
from .queue import step_problem
from .vector_cache import VectorCache

__all__ = ["Admin"]


class Admin(Table):
    def __init__(self, con, caches: list[VectorCache]):
        super().__init__(con)
        self.caches = caches

    def meta(self) -> dict[str, str]:
        return store.read_meta(self.con)

    def set_meta(self, **values: object) -> None:
        store.set_meta(self.con, **values)

    def record_llm_call(self, *, at: str, purpose: str, model: str, prompt_tokens: int, completion_tokens: int,
                        latency_ms: float, ok: bool, error: str | None) -> None:
        self.con.execute(
            "INSERT INTO llm_calls(at, purpose, model, prompt_tokens, completion_tokens, latency_ms, ok, error) "
            "VALUES(?,?,?,?,?,?,?,?)",
            (at, purpose, model, prompt_tokens, completion_tokens, latency_ms, int(ok), error))

    def stats(self) -> dict[str, int]:
        q = self.con.execute
        return {
            "messages": q("SELECT count(*) FROM messages").fetchone()[0],
            "segments": q("SELECT count(*) FROM segments").fetchone()[0],
            "trajectories": q("SELECT count(*) FROM trajectories").fetchone()[0],
            "core_facts": q("SELECT count(*) FROM core_facts WHERE valid_to IS NULL").fetchone()[0],
            "superseded_facts": q("SELECT count(*) FROM core_facts WHERE valid_to IS NOT NULL").fetchone()[0],
            "active_facts": q("SELECT count(*) FROM active_facts").fetchone()[0],
            "candidates": q("SELECT count(*) FROM candidate_clusters").fetchone()[0],
            "llm_calls": q("SELECT count(*) FROM llm_calls").fetchone()[0],
            "llm_failures": q("SELECT count(*) FROM llm_calls WHERE ok=0").fetchone()[0],
            "pending_steps": q("SELECT count(*) FROM work_queue").fetchone()[0],
            "oldest_pending_s": q("SELECT coalesce(CAST(round((julianday('now') - julianday(min(created_at))) * 86400) "
                                  "AS INTEGER), 0) FROM work_queue").fetchone()[0],
        }

    def export(self) -> Iterator[dict]:
        return export_rows(self.con)

    def export_to(self, path: Path, *, overwrite: bool = False) -> int:
        """Write the export to ``path``, private to its owner (0600): through a temporary file of a
        random name in the same directory (created exclusively, so never through a planted link),
        moved into place when complete. An existing ``path`` (a symlink too) is refused unless
        ``overwrite``, and then it is replaced, never written through."""
        if not overwrite and os.path.lexists(path):
            raise InvalidInputError(f"{path} already exists; choose a new file (or overwrite it: --force)")
        mine = self.con.db_filename("main")
        if os.path.realpath(path) in {os.path.realpath(mine + side) for side in ("", "-wal", "-shm", "-journal")}:
            raise InvalidInputError(f"{path} is this memory file (or its side file); export to another file")
        n = 0
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
        except OSError as e:
            raise InvalidInputError(f"cannot write {path}: {e.strerror or e}") from None
        try:
            with open(fd, "w", encoding="utf-8") as fh:
                for obj in export_rows(self.con):
                    fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
                    n += 1
            _move_into_place(tmp, path, overwrite)
        except OSError as e:
            raise InvalidInputError(f"cannot write {path}: {e.strerror or e}") from None
        finally:
            Path(tmp).unlink(missing_ok=True)
        return n

    def import_from(self, path: Path, *, model_id: str, dim: int) -> dict[str, int]:
        """Load an export file into this fresh file, in one transaction. An export may come from
        anyone: every row is checked as memsif would have written it (:func:`_row_problem`) and the
        first one refused is named by its line; then nothing is loaded. The change log gets one
        ``import`` row naming everything loaded (an export does not carry the log)."""
        try:
            fh = open(path, encoding="utf-8")
        except OSError as e:
            raise InvalidInputError(f"cannot read {path}: {e.strerror or e}") from None
        lines = _Lines(fh)
        marks: dict[str, int] = {}
        try:
            with fh, store.write(self.con):
                counts = import_rows(self.con, _checked(read_export(lines), lines, dim, marks),  # type: ignore[arg-type]
                                     model_id=model_id, dim=dim)
                for table, high in marks.items():  # ids forgotten before the export stay unused here too
                    retire_id(self.con, table, high)
                ChangeLog(self.con).note_all("import", "user", summary=f"{counts.get('messages', 0)} messages "
                                             "imported from an export, with what was derived from them")
        except UnicodeDecodeError:
            raise InvalidInputError(f"{path} is not a memsif export (not UTF-8 text)") from None
        except InvalidInputError as e:
            if lines.done or str(e).startswith("export line"):
                raise
            raise InvalidInputError(f"export line {lines.n}: {e}") from None
        finally:
            for c in self.caches:
                c.invalidate()
        return counts

    def check(self) -> list[str]:
        return check_connection(self.con)

    def compact(self, path: Path) -> CompactReport:
        """:func:`~.maintenance.compact` the file at ``path`` (this connection's), timed."""
        t = time.perf_counter()
        before, after, wal = compact(self.con, path)
        return CompactReport(before, after, wal, round(time.perf_counter() - t, 3))

    def backup(self, dest: str | Path) -> None:
        """``VACUUM INTO`` a file this call creates, empty and 0600 (SQLite accepts an empty
        target and keeps its mode): never an existing path, nor a symlink, dangling or not."""
        d = Path(dest)
        try:
            fd = os.open(d, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            raise InvalidInputError(f"{d} already exists; choose a new file for the backup") from None
        except OSError as e:
            raise InvalidInputError(f"cannot write {d}: {e.strerror or e}") from None
        os.close(fd)
        try:
            backup(self.con, d)
        except BaseException:
            d.unlink(missing_ok=True)
            raise


def _move_into_place(tmp: str, path: Path, overwrite: bool) -> None:
    """``tmp`` becomes ``path``: renamed over it with ``overwrite``, else linked, which fails if
    anything appeared there meanwhile (where hard links are unsupported: renamed after a check)."""
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise InvalidInputError(f"{path} already exists; choose a new file (or overwrite it: --force)") from None
    except OSError:
        if os.path.lexists(path):
            raise
        os.replace(tmp, path)


class _Lines:
    """An export's lines, counted: the number of the line read last names the row being loaded."""

    def __init__(self, fh: IO[str]):
        self.fh, self.n, self.done = fh, 0, False

    def __iter__(self) -> Iterator[str]:
        for n, line in enumerate(self.fh, start=1):
            self.n = n
            yield line
        self.done = True


#: time columns (stored UTC text, :func:`~memsif_lite.timeutil.is_stored`); NULL allowed where marked
_TIMES: dict[str, tuple[str, ...]] = {
    "messages": ("at", "created_at"), "llm_calls": ("at",), "trajectories": ("start_at", "end_at"),
    "segments": ("start_at", "end_at"), "core_facts": ("valid_from", "valid_to?", "created_at", "updated_at"),
    "fact_history": ("at",), "candidate_clusters": ("created_at", "updated_at"), "cluster_statements": ("at",),
    "cluster_queries": ("at",), "active_facts": ("created_at", "updated_at"), "work_queue": ("created_at",),
    "tombstones": ("created_at", "local_at?"), "session_items": ("at",)}
#: BLOB columns and the lengths they may have (``dim`` bytes per unit)
_BLOBS: dict[tuple[str, str], tuple[int, ...]] = {
    ("messages", "content_hash"): (CONTENT_KEY, 32), ("tombstones", "hash"): (32,), ("trajectories", "vec_sum"): (4, 8),
    ("segments", "vec_sum"): (0, 4, 8), ("cluster_statements", "vector"): (4,), ("cluster_queries", "vector"): (4,)}


def _checked(rows: Iterator[dict], lines: _Lines, dim: int, marks: dict[str, int]) -> Iterator[dict]:
    """The export's objects, each row refused (naming its line) unless memsif could have written
    it; the header's id high-water marks are kept in ``marks``."""
    header = next(rows, None)
    if isinstance(header, dict) and isinstance(header.get("meta"), dict):
        for table, key in ID_HIGH.items():
            value = header["meta"].get(key)
            if isinstance(value, str) and value.isascii() and value.isdigit() and int(value) < ID_LIMIT - 1:
                marks[table] = int(value)
    if header is not None:
        yield header
    for obj in rows:
        why = _row_problem(obj, dim)
        if why is not None:
            raise InvalidInputError(f"export line {lines.n}: {why}")
        yield obj


def _row_problem(obj: dict, dim: int) -> str | None:
    """Why one export row cannot be loaded as it is, or None (the loader checks the rest: columns,
    tables, vector sizes, references)."""
    table, row = obj.get("table"), obj.get("row")
    if not isinstance(table, str) or not isinstance(row, dict):
        return None  # the loader names these
    values: dict[str, Any] = {}
    for col, v in row.items():
        why = _value_problem(v)
        if why is not None:
            return f"{table}.{col}: {why}"
        if isinstance(v, dict):
            v = base64.b64decode(v["b64"], validate=True)
        values[col] = v
    for col in _TIMES.get(table, ()):
        name, nullable = col.rstrip("?"), col.endswith("?")
        if not (is_stored(values.get(name)) or (nullable and values.get(name) is None)):
            return f"{table}.{name} {str(values.get(name))[:40]!r} is not a memsif timestamp"
    for (t, col), units in _BLOBS.items():
        if t == table and col in values:
            v = values[col]
            sizes = [u * dim if col != "hash" and col != "content_hash" else u for u in units]
            if not isinstance(v, bytes) or len(v) not in sizes:
                return f"{table}.{col} is not a blob of {' or '.join(map(str, sizes))} bytes"
            if units == (4,) and not np.isfinite(np.frombuffer(v, dtype=np.float32)).all():
                return f"{table}.{col} holds a non-finite vector"
    if table == "segments" and values.get("vec_sum") == b"" and values.get("trajectory_id") is None:
        return "segments.vec_sum is empty for a segment in no trajectory"
    if table == "session_items":
        why = stored_item_problem(values.get("item"))
        if why is not None:
            return f"session_items.item is {why}"
    if table == "messages":
        for col in ("speaker", "text"):
            if not isinstance(values.get(col), str) or not values[col].strip():
                return f"messages.{col} is empty"
        off = values.get("utc_offset_min")
        if off is not None and not (isinstance(off, int) and abs(off) <= 24 * 60):
            return "messages.utc_offset_min is not a UTC offset in minutes"
    if table == "work_queue":
        why = step_problem(values.get("kind"), values.get("segment_id"), values.get("payload"))
        if why is not None:
            return f"work_queue: {why}"
    return None


def _value_problem(v: Any) -> str | None:
    """A JSON value SQLite can store as memsif does: no booleans, 64-bit integers, finite numbers,
    valid Unicode, base64 BLOBs."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int) and not -INT64_MAX - 1 <= v <= INT64_MAX:
        return "an integer beyond 64 bits"
    if isinstance(v, float) and not math.isfinite(v):
        return "a non-finite number"
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return "text that is not valid Unicode"
    if isinstance(v, dict):
        if set(v) != {"b64"} or not isinstance(v["b64"], str):
            return "a bad binary value"
        try:
            base64.b64decode(v["b64"], validate=True)
        except ValueError:
            return "a binary value that is not base64"
    if isinstance(v, list):
        return "a list"
    return None
