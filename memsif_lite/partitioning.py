"""Keeping the dense partition of message vectors (:mod:`memsif_lite.partition`) up to date in
the file: :func:`refresh`, run by ``Memory.process``, the background worker and offline inline
``add``."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from . import partition as dense
from .db import Database

__all__ = ["refresh", "RefreshReport"]

log = logging.getLogger("memsif_lite")


@dataclass(frozen=True)
class RefreshReport:
    trained: bool
    assigned: int
    pending: int


def refresh(db: Database, *, max_seconds: float | None = None, min_pending: int = 1,
            repair: bool = False) -> RefreshReport:
    """Bring the file's partition up to date, as far as ``max_seconds`` allows (training, when due,
    is done whole): train new lists when due, then give the messages stored since their lists,
    :data:`~memsif_lite.partition.BATCH` at a time, each batch in its own short write transaction;
    nothing when fewer than ``min_pending`` wait and no training is due. ``repair``: also list
    again the messages of any block that is lost or damaged (``memsif process``). Reads what it
    needs from the file (no vector cache). Never inside a transaction; safe to stop anywhere and
    to run in several processes."""
    t0 = time.perf_counter()
    rows = db.partition
    if db.in_transaction or not rows.present():
        return RefreshReport(False, 0, 0)
    with db.read():
        top, head, version = rows.max_message_id(), rows.header(), rows.version()
    trained_rows = head[1] if head is not None else 0
    current: dense.Centroids | None = None
    trained = False
    # training is due when the file holds GROWTH times the rows the lists were trained on; the
    # highest id bounds the count, and a count taken earlier bounds it better (forgotten ids)
    if top >= dense.MIN_ROWS and top >= dense.GROWTH * trained_rows and top >= rows.count_due_at:
        with db.read():
            ids = rows.message_ids()
            n = len(ids)
            due = n >= dense.MIN_ROWS and (head is None or n >= dense.GROWTH * trained_rows)
            if due:
                lists = dense.list_count(n)
                size = min(n, dense.MAX_SAMPLE, dense.SAMPLE_PER_LIST * lists)
                sample = np.sort(np.random.default_rng(n).choice(ids, size, replace=False))
                codes = rows.codes_of(sample)[1]
        if not due:  # the count cannot reach the threshold before the highest id grows this far
            rows.count_due_at = top + max(dense.MIN_ROWS, dense.GROWTH * trained_rows) - n
        else:
            vectors = dense.train(codes, lists)
            with db.write():
                if rows.version() != version:
                    return RefreshReport(False, 0, 0)  # another process trained meanwhile: its lists stand
                version = rows.replace(n, vectors)
            current, trained, pending = dense.Centroids(version, n, vectors), True, n
            log.info("dense partition: %d lists trained on %d message vectors", lists, n)
    if current is None:
        if head is None:
            return RefreshReport(trained, 0, 0)
        with db.read():
            pending = rows.pending(head[2])
        if pending < min_pending and not repair:
            return RefreshReport(trained, 0, pending)
        with db.read():  # the centroids only now: most calls (an add's) stop above
            current = rows.current()
        if current is None:
            return RefreshReport(trained, 0, pending)
    done = _relist_lost_blocks(db, current) if repair else 0
    if pending < min_pending:
        return RefreshReport(trained, done, pending)
    through = current.assigned_through
    listed = 0
    while max_seconds is None or time.perf_counter() - t0 < max_seconds:
        with db.read():
            ids, codes = rows.codes_after(through, dense.BATCH)
        if not len(ids):
            break
        lists_of = dense.assign(codes, current.vectors)
        with db.write():
            if rows.version() != current.version:
                break  # trained again meanwhile: the next refresh lists the messages under the new lists
            rows.set_lists(current.version, ids, lists_of)
        through, listed = int(ids[-1]), listed + len(ids)
    return RefreshReport(trained, done + listed, max(0, pending - listed))


def _relist_lost_blocks(db: Database, current: dense.Centroids) -> int:
    """List again the messages (up to ``assigned_through``) of every block of ids that is missing
    or damaged under ``current``; returns how many."""
    rows = db.partition
    with db.read():
        lost = sorted(rows.message_blocks(current.assigned_through) - set(rows.blocks(current)))
    done = 0
    for b in lost:
        with db.read():
            ids, codes = rows.codes_in_block(b, current.assigned_through)
        with db.write():
            if rows.version() != current.version:
                break
            rows.write_lists(current.version, ids, dense.assign(codes, current.vectors), blocks=[b])
        done += len(ids)
    if lost:
        log.info("dense partition: %d lost or damaged blocks listed again (%d messages)", len(lost), done)
    return done
