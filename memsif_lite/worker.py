"""The work queue's worker: write now, think later (paper pipeline steps run from the file).

A step is taken from the head of the queue and run in two phases:

1. *decide* with no transaction open: read the state it needs and ask the judges, extractors and
   choosers — an LLM when one is configured, which may take seconds;
2. *apply* in one short ``BEGIN IMMEDIATE`` transaction that first checks the step is still
   pending and the state it read is still current (``StaleError`` otherwise: another process got
   there first, or ``forget`` changed it, and the decision is discarded and made again), then
   writes the result, deletes the step and enqueues what follows.

Steps are idempotent: a step is deleted in the transaction that applies it, so ``kill -9`` at any
point redoes at most the step in flight, and two processes draining one file never apply the
same step twice. Offline, ``add`` runs the same steps inside its own transaction (no LLM, so
nothing waits), so an offline user sees the structure at once.
"""

from __future__ import annotations

import dataclasses

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import prompts
from .core_facts import Candidate, CoreFactWriter
from .db import Database, Step
from .db.queue import CLOSE, EXTRACT, FACT, PLACE, step_problem
from .entities import extract_entities
from .errors import LLMError
from .llm import LLM, ModelHealth, Prompt
from .segments import SegmentBuilder, StaleError, segment_lines
from .timeutil import now_stored
from .trajectories import TrajectoryBuilder

__all__ = ["Worker", "ProcessReport", "Background", "Processor"]

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
                 core_facts: CoreFactWriter, llm: LLM | None):
        self.db = db
        self.segments, self.trajectories, self.core_facts, self.llm = segments, trajectories, core_facts, llm
        self._hints: dict[int, tuple[np.ndarray, list[str]]] = {}
        self._asked: set[tuple[int, int]] = set()  # steps whose prompts were asked ahead

    def hint(self, message_id: int, vec: np.ndarray, ents: list[str]) -> None:
        """The vector and entities of a message just stored (saves reading them back)."""
        self._hints[message_id] = (vec, ents)

    def run(self, *, max_steps: int | None = None, max_seconds: float | None = None,
            progress: Callable[[int], None] | None = None,
            stop: Callable[[], bool] | None = None) -> ProcessReport:
        """Run steps from the head of the queue until it is empty, a limit is reached or ``stop()``."""
        t0 = time.perf_counter()
        done = stale = aside = 0
        try:
            while max_steps is None or done < max_steps:
                if max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
                    break
                if stop is not None and stop():
                    break
                step = self._next()
                if step is None:
                    break
                why = step_problem(step.kind, step.segment_id, step.payload)
                if why is not None:  # a row from a crafted file or export must not stop every later write
                    with self.db.write_or_join():
                        self.db.queue.set_aside(step, why)
                    aside += 1
                    continue
                try:
                    self.run_step(step)
                    done += 1
                    if progress is not None and step.kind == PLACE:
                        progress(1)
                except StaleError as e:
                    stale += 1
                    log.info("step %s %d was stale (%s); deciding again", step.kind, step.id, e)
                    if stale > MAX_STALE * (done + 1):
                        raise
        finally:
            self._hints.clear()
            if self.llm is not None:
                self.llm.settle()
                if len(self._asked) > 10_000:
                    self._asked.clear()
        pending, _ = self.db.queue.backlog()
        return ProcessReport(done, pending, time.perf_counter() - t0, stale, aside)

    def run_step(self, step: Step) -> None:
        if step.kind == PLACE:
            self._place(step)
        elif step.kind == CLOSE:
            self._close(step)
        elif step.kind == EXTRACT:
            self._extract(step)
        elif step.kind == FACT:
            self._fact(step)
        else:  # pragma: no cover - run() sets other kinds aside (step_problem)
            raise AssertionError(f"unknown step kind {step.kind!r}")

    # -- the four kinds ------------------------------------------------------------------------
    def _place(self, step: Step) -> None:
        msg = self.db.messages.get(step.message_id)
        if msg is None:  # forgotten meanwhile
            return self._drop(step)
        hint = self._hints.pop(msg.id, None)
        vec, ents = hint if hint is not None else (self.db.messages.vector(msg.id), extract_entities(msg.text))
        if vec is None:
            return self._drop(step)
        decision = self.segments.decide(vec, ents, msg.at, f"{msg.speaker}: {msg.text}")
        with self.db.write_or_join():
            if not self._still_pending(step):
                return
            closed = self.segments.apply(msg.id, vec, ents, msg.at, decision)
            if closed is not None:
                self.db.queue.push(CLOSE, msg.id, now_stored(), segment_id=closed)
            self.db.queue.done(step)

    def _close(self, step: Step) -> None:
        sid = step.segment_id
        assert sid is not None
        if self.db.structure.segment_state(sid) is None:  # emptied by forget
            return self._drop(step)
        title = None
        if self.llm is not None:
            title = self.llm.complete(self._title_prompt(sid))
        decision = self.trajectories.decide(sid)
        with self.db.write_or_join():
            if not self._still_pending(step):
                return
            state = self.db.structure.segment_state(sid)
            if state is not None and state[1] is None:
                if title:
                    self.db.structure.set_segment_title(sid, title)
                self.trajectories.apply(sid, decision)
                self.db.queue.push(EXTRACT, step.message_id, now_stored(), segment_id=sid)
            self.db.queue.done(step)

    def _extract(self, step: Step) -> None:
        sid = step.segment_id
        assert sid is not None
        if self.db.structure.segment_state(sid) is None:
            return self._drop(step)
        candidates = self.core_facts.extract(sid)
        with self.db.write_or_join():
            if not self._still_pending(step):
                return
            for i, c in enumerate(candidates):
                self.db.queue.push(FACT, step.message_id, now_stored(), payload=c.to_json(), index=i)
            self.db.queue.done(step)

    def _fact(self, step: Step) -> None:
        assert step.payload is not None
        c = Candidate.from_json(step.payload)
        alive = tuple(m for m in c.message_ids if self.db.messages.exists(m))
        if not alive:  # every source forgotten meanwhile
            return self._drop(step)
        if alive != c.message_ids:
            c = dataclasses.replace(c, message_ids=alive)
        decision = self.core_facts.decide(c)
        with self.db.write_or_join():
            if not self._still_pending(step):
                return
            self.core_facts.apply(c, decision)
            self.db.queue.done(step)

    # -- concurrency (Config.llm_concurrency) --------------------------------------------------------
    def _next(self) -> Step | None:
        """The head of the queue; with several LLM requests allowed, placement runs ahead of the
        closes, extractions and fact steps until that many segments wait for their LLM work (a
        boundary decision reads only the open segment, so this changes no result), and the
        independent prompts of what waits — titles, CoreFact extraction — are asked together."""
        head = self.db.queue.head()
        llm = self.llm
        if head is None or llm is None or llm.concurrency < 2:
            return head
        waiting = self.db.queue.pending((CLOSE, EXTRACT), llm.concurrency)
        batch: list[Prompt[Any]] = []
        for w in waiting:
            if w.segment_id is None:  # malformed: run() sets it aside when it reaches the head
                continue
            if (w.message_id, w.sub) in self._asked or self.db.structure.segment_state(w.segment_id) is None:
                continue
            self._asked.add((w.message_id, w.sub))
            if w.kind == CLOSE:
                batch.append(self._title_prompt(w.segment_id))
            else:
                p = self.core_facts.extract_prompt(w.segment_id)
                if p is not None:
                    batch.append(p)
        llm.prefetch(batch)
        if head.kind != PLACE and len(waiting) < llm.concurrency:
            place = self.db.queue.pending((PLACE,), 1)
            if place:
                return place[0]
        return head

    def _title_prompt(self, sid: int) -> Prompt[str]:
        return prompts.title(segment_lines(self.db, sid, 12))

    # -- helpers ---------------------------------------------------------------------------------
    def _still_pending(self, step: Step) -> bool:
        """Inside the apply transaction: has another process applied this step already?"""
        return self.db.queue.exists(step)

    def _drop(self, step: Step) -> None:
        with self.db.write_or_join():
            self.db.queue.done(step)


class Background:
    """A daemon thread that drains the queue on a connection of its own while the application
    runs, so ``add`` never waits on a model. ``close`` asks it to stop and waits briefly: a step
    whose LLM call is still in flight is applied (or redone by the next run) when the reply
    comes — safe either way, since a step is applied at most once. It survives outages: while the model is down (see
    :class:`~memsif_lite.llm.ModelHealth`) it waits instead of falling back, and a busy file or
    an unexpected error only pauses it. A configuration error (:class:`LLMError`) stops it and
    is raised by the next ``add``/``process``/``close``."""

    def __init__(self, open_worker: Callable[[], tuple[Worker, Callable[[], None]]], *,
                 health: ModelHealth | None, idle_s: float = 1.0):
        self._open_worker = open_worker
        self._health = health
        self._idle_s = idle_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="memsif-worker", daemon=True)
        self.error: BaseException | None = None
        self.steps = 0

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def take_error(self) -> BaseException | None:
        err, self.error = self.error, None
        return err

    def _main(self) -> None:
        try:
            worker, close = self._open_worker()
        except BaseException as e:  # noqa: BLE001 - reported to the application, never lost
            self.error = e
            return
        pause = self._idle_s
        try:
            while not self._stop.is_set():
                if self._health is not None and not self._health.available():
                    self._stop.wait(min(self._health.seconds_left(), 5.0))
                    continue
                try:
                    report = worker.run(max_seconds=5.0, stop=self._stop.is_set)
                    self.steps += report.steps
                    pause = self._idle_s
                    if report.pending and report.steps:
                        continue
                except LLMError as e:
                    log.error("background processing stopped: %s", e)
                    self.error = e
                    return
                except Exception:  # noqa: BLE001 - busy file, a bug in a judge...: pause, retry later
                    log.exception("background processing failed; retrying in %.0f s", pause)
                    pause = min(pause * 2, 60.0)
                self._wake.wait(pause)
                self._wake.clear()
        finally:
            close()


class Processor:
    """How queued steps run, the user's choice (``Memory(process=...)``):

    * ``"inline"`` — inside ``add``: offline in its own transaction (the default without an
      LLM); with an LLM after the commit, with no transaction open (``add`` waits, the file's
      write lock does not);
    * ``"background"`` — a daemon thread with its own connection (the default with an LLM);
    * ``"manual"`` — only when :meth:`run` (``Memory.process``, ``memsif process``) is called.
    """

    MODES = ("inline", "background", "manual")

    def __init__(self, mode: str, worker: Worker, *, offline: bool, background: Background | None):
        self.mode, self.worker, self.offline, self.background = mode, worker, offline, background
        if background is not None:
            background.start()

    @property
    def in_add(self) -> bool:
        """Run the steps inside ``add``'s own transaction."""
        return self.mode == "inline" and self.offline

    def after_add(self) -> None:
        self._raise_background_error()
        if self.mode == "inline" and not self.offline:
            self.worker.run()
        elif self.background is not None:
            self.background.wake()

    def run(self, max_steps: int | None, max_seconds: float | None) -> ProcessReport:
        self._raise_background_error()
        return self.worker.run(max_steps=max_steps, max_seconds=max_seconds)

    def close(self, timeout: float) -> None:
        if self.background is not None:
            self.background.stop(timeout)
            self._raise_background_error()

    def _raise_background_error(self) -> None:
        if self.background is not None and (err := self.background.take_error()) is not None:
            raise err
