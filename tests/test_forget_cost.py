"""A forget reads what it must and no more: the before images it erases are found by a search of
each change's inflated JSON for the keys forgotten (memsif_lite/db/rewind.py, ``Rewind.erase``),
and the words said beside a forgotten message are read once per segment (forgetting.Shown).
These check that the shortcuts change nothing: erase removes exactly the images of the rows
forgotten, whatever the keys."""
from __future__ import annotations

import random

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder
from memsif_lite import Memory
from memsif_lite.db.changes import ChangeLog
from memsif_lite.db import rewind
from memsif_lite.db.rewind import Rewind, pack, unpack

TABLES = ("segments", "trajectories", "core_facts", "fact_sources")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A small memory file with real segment, trajectory, CoreFact and fact source rows to take
    images of."""
    path = tmp_path_factory.mktemp("erase") / "m.db"
    with Memory(path, embedder=FakeEmbedder()) as mem:
        for i in range(12):
            mem.add("Ana" if i % 2 else "Ben", f"I love green tea number {i} on topic{i // 4}.")
        mem.add("Ben", "Did you watch the football match yesterday?", at="2031-01-01T10:00:00")  # closes it
        mem.process()
    return path


def _rows(con: apsw.Connection) -> dict[str, list[list]]:
    return {t: [[None if isinstance(v, bytes) else v for v in r] for r in con.execute(f"SELECT * FROM {t}")]
            for t in TABLES}  # (an image keeps no blob: a unit's vector sum is derived)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), chunk=st.sampled_from([1, 3, rewind.ERASE_CHUNK]))
def test_erase_removes_exactly_the_images_of_the_rows_forgotten(base, tmp_path_factory, monkeypatch, seed, chunk):
    """Every image of a forgotten row goes (a fact source's key takes its fact's images too), every
    other entry stays (a few keys or many; the log read a row, three rows or all at a time), a change
    with nothing to erase keeps its stored bytes, and images that are not a JSON object are erased
    (as before the search)."""
    rng = random.Random(seed)
    path = tmp_path_factory.mktemp("e") / "m.db"
    path.write_bytes(base.read_bytes())
    con = apsw.Connection(str(path))
    try:
        real = _rows(con)
        assert all(real[t] for t in TABLES)
        pool = [rng.choice([1, 2, 3, 9, 10, 11, 19, 21, 100, 2023, 10**6]) for _ in range(8)]
        changes = []
        con.execute("BEGIN IMMEDIATE")
        log = ChangeLog(con)
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.1:  # damaged: not an object
                images = rng.choice([None, ["core_facts", "secret words"], 7])
            else:
                images = {}
                for t in TABLES:
                    if rng.random() < 0.4:
                        continue
                    entries = []
                    for _ in range(rng.randint(1, 4)):
                        key = [rng.choice(pool)] if t != "fact_sources" else [rng.choice(pool), rng.choice(pool)]
                        row = list(rng.choice(real[t]))
                        row[:len(key)] = key
                        entries.append([key, None if rng.random() < 0.3 else row])
                    images[t] = entries
            blob = pack(images)
            cid = log.write("place", "rule", ids={}, before=blob)
            changes.append((cid, images, blob))
        keys = {t: {tuple(rng.choice(pool) for _ in range(1 if t != "fact_sources" else 2))
                    for _ in range(rng.randint(0, 3))} for t in TABLES}
        if rng.random() < 0.5:  # keys no change holds, more than a search names one by one (then compared)
            keys["trajectories"] |= {(rng.randint(10**7, 10**9),) for _ in range(40)}
        monkeypatch.setattr(rewind, "ERASE_CHUNK", chunk)
        Rewind(con).erase(keys)
        gone = dict(keys, core_facts=keys["core_facts"] | {(k[0],) for k in keys["fact_sources"]})
        for cid, images, blob in changes:
            (got,) = con.execute("SELECT images FROM change_log WHERE id=?", (cid,)).fetchone()
            if not isinstance(images, dict):
                assert got is None
                continue
            kept = {t: [e for e in v if e[1] is None or tuple(e[0]) not in gone[t]] for t, v in images.items()}
            kept = {t: v for t, v in kept.items() if v}
            if kept == images:
                assert got == blob  # untouched: stored as it was
            else:
                assert (unpack(got) if got is not None else {}) == kept
        con.execute("ROLLBACK")
    finally:
        con.close()


def test_a_forget_reads_a_segment_once_however_many_changes_cite_it(tmp_path):
    """Forgetting a message of a long segment reads that segment a few times, not once per change
    citing one of its messages (each place change cites one): rows read grow with the segment,
    not with its square (counted on every connection opened meanwhile: ``apsw.connection_hooks``)."""
    rows = {}
    for n in (40, 160):
        path = tmp_path / f"{n}.db"
        counted = []

        def hook(con, counted=counted):
            con.row_trace = lambda _cur, row: counted.append(1) or row

        with Memory(path, embedder=FakeEmbedder()) as mem:
            # each message a fact, each fact a change row that shares words with every other message
            ids = [mem.add("W", f"I love green tea number {i}.") for i in range(n)]
            mem.add("V", "Did you watch the football match yesterday?", at="2031-01-01T10:00:00")  # closes it
            mem.process()
        apsw.connection_hooks.append(hook)
        try:
            with Memory(path, embedder=FakeEmbedder()) as mem:
                before = len(counted)
                mem.forget(message_id=ids[n // 2])
                rows[n] = len(counted) - before
        finally:
            apsw.connection_hooks.remove(hook)
    assert rows[160] < 6 * rows[40], rows


@given(calls=st.lists(st.tuples(st.sampled_from(["messages", "facts"]), st.lists(st.integers(0, 30), max_size=8)),
                      max_size=12))
def test_a_change_names_what_it_touched_once_each_in_first_touched_order(calls):
    """``Journal.touch`` (a forget by source touches every message of the source: a set, not a list
    scan, says whether one is named already)."""
    from memsif_lite.db.changes import Journal

    j = Journal(False, 0)
    for kind, ids in calls:
        j.touch(kind, ids)
    want: dict[str, list[int]] = {}
    for kind, ids in calls:
        want[kind] = list(dict.fromkeys(want.get(kind, []) + ids))
    assert j.ids == want

