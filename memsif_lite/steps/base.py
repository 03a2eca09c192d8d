"""What every kind of step is (:class:`Step`), the collaborators it works with (:class:`Tools`),
what the runner did with a queued step (:class:`Outcome`) and the registry (:class:`Registry`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Generic, Iterator, TypeVar

import numpy as np

from ..core_facts import CoreFactWriter
from ..db import Database, MessageRow, QueuedStep
from ..db import queue
from ..llm import LLM, Prompt
from ..segments import SegmentBuilder
from ..trajectories import TrajectoryBuilder

__all__ = ["StepKind", "Outcome", "Tools", "Rebuild", "Step", "SegmentStep", "Registry", "REKEYED"]

D = TypeVar("D")

#: the sub of the steps a rebuild moves onto its first replayed message: 1000, 1001, ... (after that
#: message's own steps, whose subs are a kind's order: place 0, close 1, extract 2, fact 3 + i)
REKEYED = 1000


class StepKind(str, Enum):
    """The kinds of step, as ``work_queue.kind`` stores them (never renamed: files keep them)."""

    PLACE = queue.PLACE
    CLOSE = "close"
    EXTRACT = "extract"
    FACT = "fact"

    def __str__(self) -> str:
        return str(self.value)


class Outcome(Enum):
    """What the runner did with one queued step."""

    APPLIED = "applied"  #: decided and applied
    GONE = "gone"  #: what it was about was forgotten meanwhile: removed
    ALREADY_APPLIED = "already applied"  #: another process applied it while this one decided
    SET_ASIDE = "set aside"  #: a row that cannot run (unknown kind, malformed): removed, logged


@dataclass
class Tools:
    """The collaborators steps work with, over one connection."""

    db: Database
    segments: SegmentBuilder
    trajectories: TrajectoryBuilder
    core_facts: CoreFactWriter
    llm: LLM | None
    #: the vector, entities and (when given) row of messages just stored in the transaction the
    #: steps run in (saves reading them back)
    hints: dict[int, tuple[np.ndarray, list[str], MessageRow | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Rebuild:
    """What a merge's rebuild removes: the segments dropped and the messages stored again."""

    dropped_segments: set[int]
    moved_messages: set[int]


class Step(Generic[D]):
    """One kind of step of the pipeline. The runner (:class:`memsif_lite.steps.runner.Runner`)
    checks a queued row with :meth:`problem`, asks :meth:`decide` with no transaction open, then,
    inside ``BEGIN IMMEDIATE`` and only if the row is still queued, :meth:`apply` — and deletes the
    row. A subclass sets ``kind`` and ``order`` and writes ``decide`` and ``apply``; the others
    have defaults."""

    #: the stored ``work_queue.kind``
    kind: ClassVar[str]
    #: the sub of its rows (plus the index given to ``Queue.push``): the order of one message's steps
    order: ClassVar[int]
    #: whether :meth:`prompt` may give a prompt to ask ahead, while earlier steps run
    asks_ahead: ClassVar[bool] = False

    def problem(self, segment_id: Any, payload: Any) -> str | None:
        """Why a row of this kind cannot run (it may come from a crafted file or export), or None."""
        return None

    def prompt(self, tools: Tools, row: QueuedStep) -> Prompt[Any] | None:
        """A prompt :meth:`decide` will send, to ask ahead beside others (None: none)."""
        return None

    def decide(self, tools: Tools, row: QueuedStep) -> D | None:
        """Read and judge, with no transaction open (an LLM may take seconds). None: what the
        step was about is gone (forgotten meanwhile); the row is removed."""
        raise NotImplementedError

    def apply(self, tools: Tools, row: QueuedStep, decision: D) -> None:
        """Write the decision and enqueue what follows, inside the write transaction; raises
        :class:`~memsif_lite.errors.StaleError` when what it decided on changed meanwhile."""
        raise NotImplementedError

    def survives(self, segment_id: Any, payload: Any, rebuild: Rebuild) -> bool:
        """Whether a queued row of a message a merge stores again is kept (moved) by the rebuild."""
        return False


class SegmentStep(Step[D]):
    """A step about one segment, which its row names: refused without it, gone when the segment
    is (emptied by ``forget``), dropped by a rebuild that drops the segment."""

    def problem(self, segment_id: Any, payload: Any) -> str | None:
        return None if isinstance(segment_id, int) else f"a {self.kind} step without its segment"

    def survives(self, segment_id: Any, payload: Any, rebuild: Rebuild) -> bool:
        return segment_id not in rebuild.dropped_segments

    @staticmethod
    def segment(tools: Tools, row: QueuedStep) -> int | None:
        """The row's segment, None if it is gone."""
        sid = row.segment_id
        return None if sid is None or tools.db.structure.segment_state(sid) is None else sid


class Registry:
    """The kinds of step, by stored kind; each one registered is known to the queue too
    (its order and its :meth:`Step.problem`)."""

    def __init__(self, *steps: Step[Any]):
        self._steps: dict[str, Step[Any]] = {}
        for s in steps:
            self.register(s)

    def register(self, step: Step[Any]) -> None:
        self._steps[str(step.kind)] = step
        queue.register(step)

    def unregister(self, kind: str) -> None:
        self._steps.pop(str(kind), None)
        queue.unregister(kind)

    def __iter__(self) -> Iterator[Step[Any]]:
        return iter(list(self._steps.values()))

    def get(self, kind: str) -> Step[Any] | None:
        return self._steps.get(kind)

    def asking_ahead(self) -> tuple[str, ...]:
        """The kinds whose prompts may be asked ahead."""
        return tuple(k for k, s in self._steps.items() if s.asks_ahead)

    def survives(self, kind: str, segment_id: Any, payload: Any, rebuild: Rebuild) -> bool:
        """Whether the rebuild keeps a queued row (a malformed or unknown one is dropped)."""
        step = self.get(kind)
        return step is not None and step.problem(segment_id, payload) is None and step.survives(
            segment_id, payload, rebuild)
