"""The steps of the paper's pipeline that run from the work queue, one class per kind, registered
in :data:`STEPS` (the one registry: adding a kind is one new module and one line there).

Words, one for each idea:

* **step** — a kind of work of the pipeline (:class:`Step`: place, close, extract, fact);
* **queued step** — one row of ``work_queue``: a step to run for a message
  (:class:`~memsif_lite.db.queue.QueuedStep`);
* **order** — where a kind's rows sit among one message's (their ``sub``);
* **decide** / **apply** — a step's two phases, without and within the write transaction;
* **runner** — runs one queued step through that sequence (:class:`~memsif_lite.steps.runner.Runner`);
* **outcome** — what the runner did with it (:class:`Outcome`);
* **worker** — drains the queue in order (:class:`~memsif_lite.worker.Worker`);
* **lookahead** — which queued step runs next and which prompts are asked ahead
  (:mod:`memsif_lite.lookahead`);
* **background** — the thread that drains the queue on its own connection
  (:mod:`memsif_lite.background`);
* **mode** — when queued steps run, the user's choice ``Memory(process=...)`` (:mod:`memsif_lite.modes`);
  *process* is only that public word and ``Memory.process()``.
"""

from __future__ import annotations

from .base import REKEYED, Outcome, Rebuild, Registry, SegmentStep, Step, StepKind, Tools
from .close import Close
from .extract import Extract
from .fact import Fact
from .place import Place
from .runner import Runner

__all__ = ["STEPS", "REKEYED", "Outcome", "Rebuild", "Registry", "Runner", "SegmentStep", "Step", "StepKind", "Tools"]

STEPS = Registry(
    Place(),
    Close(),
    Extract(),
    Fact(),
)
