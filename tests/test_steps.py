"""Queued steps are things (issue 25): one class per kind, registered in one place, run by one
runner. A kind defined here, in the test, goes through the same registry and runner as the
paper's four: adding a kind is one class and one registry line."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from fakes import FakeEmbedder, raw
from memsif_lite import Config
from memsif_lite.db import Database, QueuedStep
from memsif_lite.db.queue import step_problem
from memsif_lite.pipelines import build, open_database
from memsif_lite.steps import STEPS, Outcome, Rebuild, Runner, SegmentStep, StepKind, Tools
from memsif_lite.timeutil import now_stored

T0 = datetime(2024, 1, 1, 10)


# -- the toy kind: a new file in the package would hold just this class ------------------------------
class Retitle(SegmentStep[str]):
    """Give a segment the title its payload names."""

    kind = "retitle"
    order = 500

    def problem(self, segment_id: Any, payload: Any) -> str | None:
        try:
            title = json.loads(payload)["title"] if isinstance(payload, str) else None
        except (ValueError, KeyError, TypeError):
            title = None
        ok = isinstance(title, str) and title.strip()
        return super().problem(segment_id, payload) or (None if ok else "a retitle step without a title")

    def decide(self, tools: Tools, row: QueuedStep) -> str | None:
        if self.segment(tools, row) is None:  # forgotten meanwhile
            return None
        return str(json.loads(str(row.payload))["title"]).strip()

    def apply(self, tools: Tools, row: QueuedStep, title: str) -> None:
        assert row.segment_id is not None
        tools.db.structure.set_segment_title(row.segment_id, title)


@pytest.fixture
def retitle():
    STEPS.register(Retitle())  # the one registry line
    yield
    STEPS.unregister("retitle")


def _stored(memory) -> int:
    """A file with two closed segments; returns the first segment's id."""
    with memory() as mem:
        mem.add("Ana", "I moved to Porto last spring.", at=T0)
        mem.add("Ana", "Quantum chromodynamics exam tomorrow, gluons everywhere.", at=T0 + timedelta(days=30))
        mem.add("Ben", "My cat Tom ate the parrot's food again.", at=T0 + timedelta(days=60))
        return mem.segments()[0].id


def _open(db):
    cfg = Config()
    database, emb, _ = open_database(db, cfg, FakeEmbedder(), read_only=False)
    return database, build(database, cfg, emb, None)


def _push(database: Database, sid: Any, payload: str | None) -> None:
    with database.write():
        database.queue.push("retitle", 1, now_stored(), segment_id=sid, payload=payload)


def _title(db, sid: int) -> str | None:
    with raw(db) as con:
        return con.execute("SELECT title FROM segments WHERE id=?", (sid,)).fetchone()[0]


def test_a_registered_kind_is_queued_at_its_order_and_run_by_the_worker(memory, db, retitle):
    sid = _stored(memory)
    database, p = _open(db)
    try:
        _push(database, sid, json.dumps({"title": "Moving to Porto"}))
        with raw(db) as con:
            assert con.execute("SELECT kind, sub FROM work_queue").fetchall() == [("retitle", 500)]
        report = p.worker.run()
        assert (report.steps, report.pending, report.set_aside) == (1, 0, 0)
        assert _title(db, sid) == "Moving to Porto"
    finally:
        database.close()


def test_the_runner_owns_the_transaction_sequence_for_any_kind(memory, db, retitle):
    sid = _stored(memory)
    database, p = _open(db)
    try:
        runner = Runner(p.worker.tools, STEPS)
        _push(database, sid, json.dumps({"title": "First"}))
        row = database.queue.head()
        assert row is not None
        assert runner.run(row) is Outcome.APPLIED and _title(db, sid) == "First"
        assert runner.run(row) is Outcome.ALREADY_APPLIED  # applied once: the row is gone
        _push(database, 10_000, json.dumps({"title": "Nowhere"}))  # its segment is gone
        row = database.queue.head()
        assert row is not None and runner.run(row) is Outcome.GONE and database.queue.head() is None
    finally:
        database.close()


def test_a_kind_validates_its_own_rows_and_an_unregistered_kind_is_set_aside(memory, db, retitle):
    sid = _stored(memory)
    assert step_problem("retitle", sid, "{}") == "a retitle step without a title"
    database, p = _open(db)
    try:
        _push(database, sid, "{}")
        with memory(process="manual") as mem:
            assert any("cannot run: a retitle step without a title" in x for x in mem.check())
        report = p.worker.run()
        assert (report.steps, report.set_aside, report.pending) == (0, 1, 0)
        _push(database, sid, json.dumps({"title": "Later"}))
        STEPS.unregister("retitle")  # a file written by a newer release, read by this one
        assert step_problem("retitle", sid, json.dumps({"title": "Later"})) == "unknown step kind 'retitle'"
        report = p.worker.run()
        assert (report.steps, report.set_aside) == (0, 1) and _title(db, sid) != "Later"
    finally:
        database.close()


def test_a_rebuild_asks_the_kind_whether_its_row_survives(retitle):
    rebuild = Rebuild(dropped_segments={2}, moved_messages={7})
    title = json.dumps({"title": "T"})
    assert STEPS.survives("retitle", 1, title, rebuild) and not STEPS.survives("retitle", 2, title, rebuild)
    assert not STEPS.survives("retitle", 1, "{}", rebuild)  # a malformed row is dropped
    assert not STEPS.survives("bogus", 1, title, rebuild)
    assert not STEPS.survives("retitle", "1", title, rebuild)


def test_the_stored_kinds_and_their_order_never_change():
    """Files written by earlier releases keep their queues: kind strings and subs are the format."""
    assert {str(s.kind): s.order for s in STEPS} == {"place": 0, "close": 1, "extract": 2, "fact": 3}
    assert [k.value for k in StepKind] == ["place", "close", "extract", "fact"]
    assert set(STEPS.asking_ahead()) == {"close", "extract"}
