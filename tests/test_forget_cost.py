"""A forget reads what it must and no more: the before images it erases are found by a search of
each change's inflated JSON for the keys forgotten (memsif_lite/db/rewind.py, ``Rewind.erase``),
and the words said beside a forgotten message are read once per segment (forgetting.Shown).
These check that the shortcuts change nothing: erase removes exactly the images of the rows
forgotten, whatever the keys and however the JSON is spaced."""
from __future__ import annotations

import random

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder
from memsif_lite import Memory
from memsif_lite.db.changes import ChangeLog
from memsif_lite.db.rewind import Rewind, pack, unpack

TABLES = ("segments", "trajectories")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A small memory file with real segment and trajectory rows to take images of."""
    path = tmp_path_factory.mktemp("erase") / "m.db"
    with Memory(path, embedder=FakeEmbedder()) as mem:
        for i in range(12):
            mem.add("Ana" if i % 2 else "Ben", f"message {i} about topic{i // 4} and things")
        mem.process()
    return path


def _rows(con: apsw.Connection) -> dict[str, list[list]]:
    return {t: [[None if isinstance(v, bytes) else v for v in r] for r in con.execute(f"SELECT * FROM {t}")]
            for t in TABLES}  # (an image keeps no blob: a unit's vector sum is derived)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_erase_removes_exactly_the_images_of_the_rows_forgotten(base, tmp_path_factory, seed):
    rng = random.Random(seed)
    path = tmp_path_factory.mktemp("e") / "m.db"
    path.write_bytes(base.read_bytes())
    con = apsw.Connection(str(path))
    try:
        real = _rows(con)
        pool = [rng.choice([1, 2, 3, 9, 10, 11, 19, 21, 100, 2023, 10**6]) for _ in range(8)]
        changes = []
        con.execute("BEGIN IMMEDIATE")
        log = ChangeLog(con)
        for _ in range(rng.randint(1, 12)):
            images = {}
            for t in TABLES:
                if not real[t] or rng.random() < 0.3:
                    continue
                entries = []
                for _ in range(rng.randint(1, 4)):
                    k = rng.choice(pool)
                    row = list(rng.choice(real[t]))
                    row[0] = k
                    entries.append([[k], None if rng.random() < 0.3 else row])
                images[t] = entries
            blob = pack(images)
            cid = log.write("place", "rule", ids={}, before=blob)
            changes.append((cid, images))
        keys = {t: {(rng.choice(pool),) for _ in range(rng.randint(0, 3))} for t in TABLES}
        Rewind(con).erase(keys)
        for cid, images in changes:
            kept = {t: [e for e in v if e[1] is None or (e[0][0],) not in keys[t]] for t, v in images.items()}
            kept = {t: v for t, v in kept.items() if v}
            (got,) = con.execute("SELECT images FROM change_log WHERE id=?", (cid,)).fetchone()
            if kept == images:
                continue  # untouched: stored as it was
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
            ids = [mem.add("W", f"w{i} same topic words here") for i in range(n)]
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
