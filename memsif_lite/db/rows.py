"""Internal row values of the data-access layer (public values are in ``memsif_lite.types``)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..int8 import dequantize, quantize
from ..matching import unit

__all__ = ["Unit", "Members", "FactRow", "MessageRow", "ActiveFactRow", "entity_json", "f32", "i8", "from_i8",
           "sum_bytes", "from_sum"]


def entity_json(c: Counter) -> str:
    """Entity counts as stored: a JSON object, sorted, no spaces (schema 16; older rows have them)."""
    return json.dumps(dict(sorted(c.items())), ensure_ascii=False, separators=(",", ":"))


def f32(v: np.ndarray) -> bytes:
    """A vector as the float32 bytes vec0 and our BLOB columns store."""
    return np.ascontiguousarray(v, dtype=np.float32).tobytes()


def i8(v: np.ndarray) -> bytes:
    """A vector as the int8 codes the vec0 tables store (bind with ``vec_int8(?)``)."""
    return quantize(v).tobytes()


def from_i8(blob: bytes) -> np.ndarray:
    """A stored int8 vector as a unit float32 vector."""
    return dequantize(np.frombuffer(blob, dtype=np.int8))


def sum_bytes(v: np.ndarray) -> bytes:
    """A running vector sum as stored (float32)."""
    return np.ascontiguousarray(v, dtype=np.float32).tobytes()


def from_sum(blob: bytes) -> np.ndarray:
    """A stored running sum, as the float64 array the pipelines accumulate into."""
    return np.frombuffer(blob, dtype=np.float32).astype(np.float64)


@dataclass
class Unit:
    """A composite unit's running state (a Topical Segment or an Event Trajectory): float64
    vector sum, entity counts, time span."""

    id: int
    n: int
    vec_sum: np.ndarray
    entities: Counter
    start_at: str
    end_at: str

    @property
    def centroid(self) -> np.ndarray:
        """Mean of the member unit vectors (for φ)."""
        return self.vec_sum / max(self.n, 1)

    @property
    def mean(self) -> np.ndarray:
        """The L2-normalised mean (what the vec0 tables hold, for vector search)."""
        return unit(self.vec_sum / max(self.n, 1))

    def add(self, vec: np.ndarray, ents: Sequence[str], at_start: str, at_end: str, n: int = 1) -> None:
        self.vec_sum = self.vec_sum + vec.astype(np.float64)
        self.entities.update(ents)
        self.n += n
        self.start_at = min(self.start_at, at_start)
        self.end_at = max(self.end_at, at_end)


@dataclass(frozen=True)
class Members:
    """A segment's or trajectory's members, in message id order: what its aggregate is made of
    (their stored int8 codes as one matrix, one row a member). Read only: members with the same
    entities share one list."""

    ids: list[int]
    codes: np.ndarray
    entities: list[list[str]]
    ats: list[str]

    @property
    def vec_sum(self) -> np.ndarray:
        """The float64 sum of their vectors, added in member order as a running sum adds them (numpy
        adds the rows of an axis-0 sum one after another; each block starts from the total so far),
        dequantised a block at a time (a trajectory of a long life holds hundreds of thousands)."""
        total = np.zeros(self.codes.shape[1], dtype=np.float64)
        for start in range(0, len(self.codes), _SUM_BLOCK):
            block = self.codes[start:start + _SUM_BLOCK]
            rows = np.empty((len(block) + 1, len(total)), dtype=np.float64)
            rows[0] = total
            rows[1:] = dequantize(block)
            total = np.add.reduce(rows, axis=0)
        return total

    def entity_counts(self) -> Counter:
        return Counter(e for ents in self.entities for e in ents)


#: member vectors dequantised at a time by :attr:`Members.vec_sum`
_SUM_BLOCK = 4096


@dataclass(frozen=True)
class MessageRow:
    """A stored message with its stored (UTC text) time, as the pipelines use it."""

    id: int
    speaker: str
    text: str
    at: str
    session: str | None
    source_id: str | None
    utc_offset_min: int | None = None     # of the time the caller gave; None: naive (UTC)
    tokens: int | None = None        # tokens of ``text``, counted at ingest


@dataclass(frozen=True)
class ActiveFactRow:
    """An ActiveFact as the query shows it: its statement and the messages of its cluster's evidence."""

    id: int
    subject: str
    stmt: str
    created_at: str
    message_ids: tuple[int, ...]


@dataclass(frozen=True)
class FactRow:
    """A current CoreFact as the Add/Update/Merge/Supersede decision sees it."""

    id: int
    subject: str
    type: str
    stmt: str
    slot: str | None
    valid_from: str
