"""The worker: write now, think later (paper pipeline steps run from the file).

The worker drains the work queue: it takes the next queued step (the head of the queue, or what
the :mod:`~memsif_lite.lookahead` picks when LLM requests may run together) and hands it to the
:class:`~memsif_lite.steps.runner.Runner`, which decides with no transaction open and applies in
one short ``BEGIN IMMEDIATE`` transaction (see :mod:`memsif_lite.steps` for the kinds of step and
the words used for each idea). A decision found stale is made again.

Steps are idempotent: a step is deleted in the transaction that applies it, so ``kill -9`` at any
point redoes at most the step in flight, and two processes draining one file never apply the
same step twice. Offline, ``add`` runs the same steps inside its own transaction (no LLM, so
nothing waits), so an offline user sees the structure at once. When steps run is the user's
choice (:mod:`memsif_lite.modes`); the :mod:`~memsif_lite.background` thread is one of them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .core_facts import CoreFactWriter
from .db import Database, MessageRow
from .llm import LLM
from .lookahead import Lookahead
from .partition import BLOCK_IDS
from .partitioning import refresh
from .errors import MemsifError, StaleError
from .segments import SegmentBuilder
from .steps import STEPS, Outcome, Registry, Runner, StepKind, Tools
from .trajectories import TrajectoryBuilder

__all__ = ["Worker", "ProcessReport"]

log = logging.getLogger("memsif_lite")
#: a decision found stale is made again at most this many times in one run
MAX_STALE = 5


@dataclass(frozen=True)
class ProcessReport:
    """What one ``process()`` run did; ``set_aside``: queued rows that could not be run (an unknown
    kind, a malformed candidate: see the log) and were removed so the queue goes on."""

    steps: int
    pending: int
    seconds: float
    stale: int
    set_aside: int = 0


class Worker:
    def __init__(self, db: Database, *, segments: SegmentBuilder, trajectories: TrajectoryBuilder,
                 core_facts: CoreFactWriter, llm: LLM | None, steps: Registry = STEPS):
        self.db, self.llm = db, llm
        self.tools = Tools(db, segments, trajectories, core_facts, llm)
        self.runner = Runner(self.tools, steps)
        self.lookahead = Lookahead(self.tools, steps)

    def hint(self, message_id: int, vec: np.ndarray, ents: list[str], row: MessageRow | None = None) -> None:
        """The vector and entities of a message just stored, and its row as stored (saves reading
        them back): only for steps run in the transaction that stored it."""
        self.tools.hints[message_id] = (vec, ents, row)

    def drop_hints(self) -> None:
        """Forget every hint: the transaction that stored their messages did not commit."""
        self.tools.hints.clear()

    def run(self, *, max_steps: int | None = None, max_seconds: float | None = None,
            progress: Callable[[int], None] | None = None,
            stop: Callable[[], bool] | None = None, thorough: bool = False) -> ProcessReport:
        """Run steps from the head of the queue until it is empty, a limit is reached or ``stop()``;
        then the dense partition (``thorough``, as ``Memory.process`` asks: every message listed and
        lost blocks listed again; else once a block of messages waits)."""
        t0 = time.perf_counter()
        done = stale = aside = 0
        try:
            while max_steps is None or done < max_steps:
                if max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
                    break
                if stop is not None and stop():
                    break
                read_at = self.db.write_stamp()  # next() reads the row it gives in this call
                row = self.lookahead.next()
                if row is None:
                    break
                try:
                    outcome = self.runner.run(row, read_at)
                except StaleError as e:
                    stale += 1
                    log.info("step %s %d was stale (%s); deciding again", row.kind, row.id, e)
                    if stale > MAX_STALE * (done + 1):
                        raise
                    continue
                if outcome is Outcome.SET_ASIDE:
                    aside += 1
                    continue
                done += 1
                if progress is not None and row.kind == StepKind.PLACE:
                    progress(1)
        finally:
            self.tools.hints.clear()
            if self.llm is not None:
                self.llm.settle()
                self.lookahead.settle()
        if not (stop is not None and stop()):  # then the dense partition (a share of the time left)
            left = None if max_seconds is None else max(0.0, max_seconds - (time.perf_counter() - t0))
            refresh(self.db, max_seconds=left, min_pending=1 if thorough else BLOCK_IDS, repair=thorough)
        pending, _ = self.db.queue.backlog()
        return ProcessReport(done, pending, time.perf_counter() - t0, stale, aside)

    def refresh_partition(self) -> None:
        """After an offline inline ``add`` (committed): the dense partition, once a block of messages
        waits for lists (or training is due), for at most a second of listing. It is a hint: a
        busy file or any other error is logged, never raised to the ``add`` that already stored
        its messages (the next one, or ``memsif process``, goes on)."""
        try:
            refresh(self.db, max_seconds=1.0, min_pending=BLOCK_IDS)
        except MemsifError as e:
            log.warning("dense partition not refreshed after add: %s", e)
