"""An Event Trajectory keeps counts of its most frequent entities only (``db.rows.TRAJECTORY_ENTITIES``):
a trajectory that runs for years keeps meeting new names and numbers, and its counts are read and
written at every link. Real files, the fake embedder; the cap made small here."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

import memsif_lite.db.structure as structure
import memsif_lite.record_time as record_time
from fakes import raw
from memsif_lite import Config
from memsif_lite.db.rows import most_frequent
from memsif_lite.timeutil import record_clock

T = datetime(2024, 1, 1, 9)
R0 = datetime(2026, 3, 1, 12)
CFG = Config(sem_low=0.0, sem_high=1.0, trajectory_threshold=0.0, segment_gap_s=3600)
NAMES = ["Aldo", "Bea", "Cruz", "Dina", "Emil", "Fern", "Gus", "Hana", "Ivo", "Jorge", "Kai", "Lupe"]


@settings(max_examples=200, deadline=None)
@given(counts=st.dictionaries(st.text(min_size=1, max_size=4), st.integers(1, 9), max_size=30), k=st.integers(0, 12))
def test_most_frequent_keeps_the_highest_counts_ties_by_name(counts, k):
    kept = most_frequent(counts, k)
    assert len(kept) == min(k, len(counts)) and all(counts[e] == n for e, n in kept.items())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    assert dict(kept) == dict(ranked[:k])


def _stored(db, tid):
    with raw(db) as con:
        return json.loads(con.execute("SELECT entities FROM trajectories WHERE id=?", (tid,)).fetchone()[0])


def test_a_trajectory_keeps_its_most_frequent_entities(memory, db, monkeypatch):
    monkeypatch.setattr(structure, "TRAJECTORY_ENTITIES", 4)
    monkeypatch.setattr(record_time, "TRAJECTORY_ENTITIES", 4)
    mem = memory(config=CFG)
    for day, (clock, names) in enumerate([(R0, NAMES[:7]), (R0 + timedelta(days=1), NAMES[7:])]):
        with record_clock(lambda c=clock: c):
            for i, name in enumerate(names):  # a segment a day, each naming Porto and someone new
                mem.add("Ana", f"Porto again today with {name}, the harbour walk.", at=T + timedelta(days=8 * day + i))
            mem.process()
        if day == 0:
            (first,) = [t for t in mem.trajectories() if len(t.segment_ids) > 1]
            then = _stored(db, first.id)
    (traj,) = [t for t in mem.trajectories() if len(t.segment_ids) > 1]
    stored = _stored(db, traj.id)
    assert traj.id == first.id and len(traj.segment_ids) > len(first.segment_ids) >= 4
    assert len(stored) == 4 and stored["porto"] >= len(traj.segment_ids) and "harbour" in stored
    assert set(traj.entities) == set(stored) and len(then) == 4
    rewound = [t for t in mem.trajectories(known_at=R0 + timedelta(hours=1)) if t.id == traj.id]
    assert [set(t.entities) for t in rewound] == [set(then)]  # counted again from its segments then
