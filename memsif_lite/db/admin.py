"""meta, llm_calls and whole-file operations (counts, checkpoints, export/import, check, backup)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from .. import store
from ..errors import InvalidInputError
from .base import Table
from .maintenance import backup, check_connection, export_rows, import_rows, read_export
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

    def checkpoint(self) -> None:
        """Fold the WAL into the main file (so its size on disk is the data's)."""
        self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def export(self) -> Iterator[dict]:
        return export_rows(self.con)

    def export_to(self, path: Path) -> int:
        """Write the export to ``path`` (through ``path.partial``, renamed when complete)."""
        tmp = Path(f"{path}.partial")
        n = 0
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                for obj in export_rows(self.con):
                    fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
                    n += 1
            tmp.replace(path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise InvalidInputError(f"cannot write {path}: {e.strerror or e}") from None
        return n

    def import_from(self, path: Path, *, model_id: str, dim: int) -> dict[str, int]:
        """Load an export file into this fresh file, in one transaction."""
        try:
            fh = open(path, encoding="utf-8")
        except OSError as e:
            raise InvalidInputError(f"cannot read {path}: {e.strerror or e}") from None
        try:
            with fh, store.write(self.con):
                counts = import_rows(self.con, read_export(fh), model_id=model_id, dim=dim)
        except UnicodeDecodeError:
            raise InvalidInputError(f"{path} is not a memsif export (not UTF-8 text)") from None
        finally:
            for c in self.caches:
                c.invalidate()
        return counts

    def check(self) -> list[str]:
        return check_connection(self.con)

    def backup(self, dest: str | Path) -> None:
        backup(self.con, dest)
