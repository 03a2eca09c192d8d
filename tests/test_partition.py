"""The dense partition of message vectors (issue 31, ``memsif_lite.partition``): lists trained
and kept in the file, searches that scan only the nearest lists and rank them exactly, and a
partition that can only ever cost recall — damaged, stale, cut by kill -9, merged — never a wrong
row. The thresholds are lowered here (the module's constants) so that small files are partitioned."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import apsw
import numpy as np
import pytest
from fakes import FakeEmbedder, raw
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsif_lite import Memory, partition
from memsif_lite.int8 import inverse_norms, quantize
from memsif_lite.partitioning import refresh
from memsif_lite.db.vector_cache import VectorCache

TESTS = Path(__file__).resolve().parent
TOPICS = 40


def conversation(n: int, start: int = 0) -> list[dict]:
    """Topical stretches: each message has three words of its topic and two of its own."""
    rng = np.random.default_rng(start)
    out = []
    for i in range(start, start + n):
        k = (i // 6) % TOPICS
        words = [f"t{k}w{j}" for j in rng.integers(0, 4, size=3)] + [f"x{rng.integers(0, 500)}", f"y{i}"]
        out.append({"speaker": "Ana" if i % 2 else "Ben", "text": " ".join(words)})
    return out


@pytest.fixture
def small_partition(monkeypatch):
    monkeypatch.setattr(partition, "MIN_ROWS", 500)
    monkeypatch.setattr(partition, "SCAN_SHARE", 0.25)


@pytest.fixture(scope="session")
def filled_file(tmp_path_factory):
    """2,400 messages in four add_many calls, their lists trained (with small_partition's settings),
    closed: built once per test process and module that imports it (two); each test of ``filled``
    opens its own copy."""
    path = tmp_path_factory.mktemp("filled") / "filled.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(partition, "MIN_ROWS", 500)
        mp.setattr(partition, "SCAN_SHARE", 0.25)
        with Memory(path, embedder=FakeEmbedder()) as mem:
            for s in range(0, 2400, 600):
                mem.add_many(conversation(600, s))
            refresh(mem._db)
    assert not Path(f"{path}-wal").exists()
    return path


@pytest.fixture
def filled(small_partition, memory, db, filled_file):
    shutil.copyfile(filled_file, db)
    os.chmod(db, 0o600)  # as memsif makes its files
    return memory()


def tamper(db: Path, *sql: str) -> None:
    """Change the file behind memsif's back (a plain connection, as any program could)."""
    con = apsw.Connection(str(db))
    try:
        for q in sql:
            con.execute(q)
    finally:
        con.close()


def exact(mem: Memory, qv: np.ndarray, k: int) -> list[tuple[int, float]]:
    return mem._db.messages.knn("message_vec", qv, k)


def query(i: int) -> np.ndarray:
    return FakeEmbedder().embed([f"t{i % TOPICS}w0 t{i % TOPICS}w1 t{i % TOPICS}w2"], kind="query")[0]


def test_lists_are_trained_kept_and_searched_exactly_inside(filled):
    db = filled._db
    current = db.partition.current()
    assert current is not None and current.lists == partition.list_count(current.trained_rows)
    ids = db.partition.message_ids()
    assert current.assigned_through == int(ids.max())
    held = db.partition.list_map(current).lookup(ids)
    assert np.all(held < current.lists)  # every message has its list
    cache = db.vectors
    recall = []
    for i in range(TOPICS):
        qv = query(i)
        got = db.messages.nearest(qv, 20)
        ix = cache._index  # the partition was used, the rows laid out list by list at the load
        assert ix is not None and ix.n == len(ids) and ix.is_contiguous
        assert np.all(np.diff(cache._lists[:cache.size].astype(np.int64)) >= 0)
        truth = dict(exact(filled, qv, len(ids)))
        assert [d for _, d in got] == sorted(d for _, d in got)
        for mid, d in got:  # each hit is a real row at its exact distance
            assert truth[mid] == pytest.approx(d, abs=1e-6)
        top = exact(filled, qv, 20)
        recall.append(len({m for m, _ in got} & {m for m, _ in top}) / 20)
    assert np.mean(recall) >= 0.9, recall


def test_scanning_every_list_is_the_exact_ranking(filled, monkeypatch):
    monkeypatch.setattr(partition, "SCAN_SHARE", 1.0)
    for i in range(0, TOPICS, 7):
        assert filled._db.messages.nearest(query(i), 30) == exact(filled, query(i), 30)


def test_a_message_without_a_list_is_always_scanned(filled, monkeypatch):
    monkeypatch.setattr(partition, "SCAN_SHARE", 0.0)  # only the nearest list, and what has none
    mid = filled.add("Ana", "t3w0 t3w1 t3w2")  # inline refresh waits for a block: no list yet
    assert filled._db.partition.current().assigned_through < mid
    hits = filled._db.messages.nearest(query(3), 5)
    assert hits[0] == exact(filled, query(3), 1)[0] and hits[0][0] == mid


def test_forgotten_messages_never_come_back(filled):
    hits = filled._db.messages.nearest(query(5), 10)
    gone = [m for m, _ in hits[:4]]
    for m in gone:
        filled.forget(message_id=m)
    again = filled._db.messages.nearest(query(5), 10)
    assert not set(gone) & {m for m, _ in again}
    ix = filled._db.vectors._index  # rebuilt after the deletions (by gathering), still used
    assert ix is not None and not ix.is_contiguous
    truth = dict(exact(filled, query(5), 10_000))
    assert all(truth[m] == pytest.approx(d, abs=1e-6) for m, d in again)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(share=st.floats(0.0, 1.0), k=st.integers(1, 60), topic=st.integers(0, TOPICS - 1))
def test_any_share_returns_true_rows_in_exact_order(filled, monkeypatch, share, k, topic):
    monkeypatch.setattr(partition, "SCAN_SHARE", share)
    qv = query(topic)
    got = filled._db.messages.nearest(qv, k)
    assert len(got) == k
    truth = dict(exact(filled, qv, 10_000))
    assert all(truth[m] == pytest.approx(d, abs=1e-6) for m, d in got)
    assert got == sorted(got, key=lambda h: (h[1], h[0]))
    if share == 1.0:
        assert got == exact(filled, qv, k)


@given(rows=st.integers(0, 10_000_000), k=st.integers(1, 500))
def test_the_scan_never_shrinks_and_stops_growing_until_a_million(rows, k):
    """At the shipped constants: never fewer rows than a share of 0.3 scanned (stop 29), at most
    0.6 of them, and from 500,000 to 1,000,000 rows the same 300,000 (64 a result at least)."""
    got = partition.scan_budget(rows, k)
    assert max(int(0.3 * rows), 64 * k) <= got <= max(int(0.6 * rows), 64 * k)
    if 500_000 <= rows <= 1_000_000:
        assert got == max(300_000, 64 * k)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(share=st.floats(0.0, 1.0), cap=st.integers(0, 3000), floor=st.floats(0.0, 1.0), k=st.integers(1, 60),
       topic=st.integers(0, TOPICS - 1))
def test_a_search_scans_its_share_up_to_the_row_cap(filled, monkeypatch, share, cap, floor, k, topic):
    """The nearest lists are taken until they hold SCAN_SHARE of the rows, but no more than
    SCAN_ROWS unless that is under MIN_SHARE of them (at least 64 a result): the scan stops within
    one list of that; the rows it ranks are still ranked exactly."""
    monkeypatch.setattr(partition, "SCAN_SHARE", share)
    monkeypatch.setattr(partition, "SCAN_ROWS", cap)
    monkeypatch.setattr(partition, "MIN_SHARE", floor)
    qv = query(topic)
    got = filled._db.messages.nearest(qv, k)  # (also brings the cache and its index up to date)
    cache = filled._db.vectors
    rows = cache._probed_rows(quantize(qv).astype(np.float32), k)
    assert rows is not None
    scanned = sum(b - a for a, b in rows) if isinstance(rows, list) else len(rows)
    budget = max(min(int(share * cache.size), cap), int(floor * cache.size))
    ix = cache._index
    assert ix is not None
    unlisted = cache.size - int(ix.sizes.sum())
    assert min(max(budget, 64 * k), cache.size) <= scanned < max(budget, 64 * k) + int(ix.sizes.max()) + unlisted
    truth = dict(exact(filled, qv, 10_000))
    assert [d for _, d in got] == sorted(d for _, d in got)
    assert all(truth[m] == pytest.approx(d, abs=1e-6) for m, d in got)


def test_damage_costs_recall_only_check_names_it_and_process_repairs_it(filled, db):
    expected = exact(filled, query(1), 10)
    filled.close()
    tamper(db, "UPDATE vector_partition SET centroids = x'00'",
           "UPDATE vector_lists SET lists = x'0102' WHERE block = 0")
    with Memory(db, embedder=FakeEmbedder()) as mem:
        assert any("vector_partition" in p for p in mem.check())
        assert mem._db.messages.nearest(query(1), 10) == expected  # no lists: every row scanned
    tamper(db, "DELETE FROM vector_partition")  # gone: the next refresh trains again
    with Memory(db, embedder=FakeEmbedder()) as mem:
        refresh(mem._db)
        assert mem.check() == []
    tamper(db, "UPDATE vector_lists SET lists = x'0102' WHERE block = 0")  # its messages count as unlisted
    with Memory(db, embedder=FakeEmbedder()) as mem:
        assert any("vector_lists" in p for p in mem.check())
        cache = mem._db.vectors
        mem._db.messages.nearest(query(1), 10)
        in_block = cache._ids[:cache.size] < partition.BLOCK_IDS
        assert np.all(cache._lists[:cache.size][in_block] == partition.NONE)
        assert set(cache._index.unlisted.tolist()) >= set(np.flatnonzero(in_block).tolist())
    tamper(db, "UPDATE vector_partition SET trained_rows = 1")  # training due: a new version, all listed again
    with Memory(db, embedder=FakeEmbedder()) as mem:
        assert refresh(mem._db).trained
        assert mem.check() == []


REFRESHER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from fakes import FakeEmbedder
    from memsif_lite import Memory, partition
    from memsif_lite.partitioning import refresh
    partition.MIN_ROWS, partition.BATCH = 500, 16
    with Memory(sys.argv[1], embedder=FakeEmbedder()) as mem:
        print("open", flush=True)
        refresh(mem._db)
    print("done", flush=True)
""")


@pytest.mark.parametrize("after", [5, 40])
def test_kill_9_while_listing_loses_nothing_and_the_next_refresh_goes_on(small_partition, memory, db, tmp_path,
                                                                         after):
    mem = memory()
    mem.add_many(conversation(1500))
    mem.close()
    script = tmp_path / "refresher.py"
    script.write_text(REFRESHER.format(tests=str(TESTS)))
    proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
    while True:  # until `after` batches are stored
        with raw(db) as con:
            row = con.execute("SELECT assigned_through FROM vector_partition").fetchone()
        if (row and row[0] >= 16 * after) or proc.poll() is not None:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Memory(db, embedder=FakeEmbedder()) as mem:
        assert mem.check() == []
        through = mem._db.partition.current().assigned_through
        report = refresh(mem._db)
        assert not report.trained and report.assigned == len([i for i in mem._db.partition.message_ids()
                                                             if i > through])
        assert mem._db.partition.current().assigned_through == 1500
        assert mem._db.messages.nearest(query(2), 5)[0][1] < 0.5


def test_merged_messages_are_found_before_and_after_they_are_listed(small_partition, memory, tmp_path, monkeypatch):
    mine = memory()
    mine.add_many(conversation(1200))
    refresh(mine._db)
    other = memory(path=tmp_path / "other.db")
    other.add_many(conversation(300, 5000))
    other.close()
    mine.merge_from(tmp_path / "other.db")
    monkeypatch.setattr(partition, "SCAN_SHARE", 0.0)  # the nearest list, and every message with none
    through = mine._db.partition.current().assigned_through
    for i in range(0, TOPICS, 5):
        ranked = [m for m, _ in exact(mine, query(i), 1500)]
        merged = next(r for r, m in enumerate(ranked) if m > through)  # the best-ranked merged message
        assert ranked[merged] in {m for m, _ in mine._db.messages.nearest(query(i), merged + 1)}
    report = refresh(mine._db)  # the merged messages (and any of mine a merge stores again)
    assert report.assigned >= 300 and report.pending == 0
    assert mine._db.partition.current().assigned_through == max(mine._db.partition.message_ids())
    assert mine.check() == []


def test_an_older_file_migrates_and_gets_lists(small_partition, tmp_path):
    from fakes import file_at_schema

    from memsif_lite import store

    path = tmp_path / "old.db"
    emb = FakeEmbedder()
    file_at_schema(path, 14, emb.dim, {"embedding_dim": str(emb.dim), "embedding_model": emb.model_id,
                                       "embedding_metric": "cosine"}).close()
    with Memory(path, embedder=emb) as mem:
        assert store.schema_version(mem._db.con) == store.latest_version()
        mem.add_many(conversation(800))
        assert refresh(mem._db).assigned == 800


def test_the_cache_loads_vec0_chunks_as_vec0_reads_its_rows(filled, monkeypatch):
    for m in [5, 6, 7, 500, 2399]:  # cleared validity bits in several chunks
        filled.forget(message_id=m)
    con = filled._db.con
    cache = VectorCache(con, filled._db.vectors.dim)
    with con:
        assert cache._load_chunks()
    rows = {r: bytes(e) for r, e in con.execute("SELECT rowid, embedding FROM message_vec")}
    got = {int(i): cache._codes[p].tobytes() for p, i in enumerate(cache._ids[:cache.size])}
    assert got == rows and cache.size == len(rows)
    monkeypatch.setattr(partition, "SCAN_SHARE", 1.0)
    with con:
        cache.sync()
    for i in range(0, TOPICS, 9):
        assert cache.search(query(i), 10) == exact(filled, query(i), 10)


@pytest.mark.parametrize("damage", [
    "UPDATE message_vec_vector_chunks00 SET vectors = substr(vectors, 1, 100) WHERE rowid = 2",  # too short
    "DELETE FROM message_vec_vector_chunks00 WHERE rowid = 3",  # a chunk's codes missing
])
def test_a_chunk_whose_codes_do_not_fit_is_not_loaded_from_the_chunks(filled, damage):
    """The codes are read by blob I/O into a buffer: a blob of another length, or none, makes the
    chunk loader give up (nothing half loaded); the caller then reads vec0's rows."""
    path = filled.path
    filled.close()
    tamper(path, damage)
    with Memory(path, embedder=FakeEmbedder()) as mem:
        con = _Blobs(mem._db.con)
        cache = VectorCache(con, mem._db.vectors.dim)
        with mem._db.con:
            assert not cache._load_chunks()
        assert cache.size == 0
        con.all_closed()


class _Blobs:
    """A connection that keeps every blob handle it opens (to check that each was closed)."""

    def __init__(self, con):
        self.con, self.blobs = con, []

    def __getattr__(self, name):
        return getattr(self.con, name)

    def blob_open(self, *args):
        blob = self.con.blob_open(*args)
        self.blobs.append(blob)
        return blob

    def all_closed(self):
        assert self.blobs
        for blob in self.blobs:
            with pytest.raises(ValueError, match="closed"):
                blob.length()


def test_the_chunk_loader_reads_every_chunk_through_one_reused_buffer(filled, monkeypatch):
    """Groups of chunks (here 3 at a time: a last group shorter) read into one buffer land where
    a row-by-row read puts them, laid out list by list."""
    from memsif_lite.db import vector_cache

    monkeypatch.setattr(vector_cache, "_GROUP", 3)
    monkeypatch.setattr(vector_cache, "_cores", lambda: 2)
    started: list[str] = []

    class Thread(threading.Thread):
        def start(self):
            started.append(self.name)
            super().start()
    monkeypatch.setattr(vector_cache.threading, "Thread", Thread)
    for m in [1, 64, 65, 1000]:
        filled.forget(message_id=m)
    con = _Blobs(filled._db.con)
    cache = VectorCache(con, filled._db.vectors.dim)
    with filled._db.con:
        cache._read_partition(cache._part.stamp())
        assert cache._centroids is not None and cache._load_chunks()
    con.all_closed()
    assert started == ["memsif-load"]  # the groups were placed beside the reads
    rows = {r: bytes(e) for r, e in con.execute("SELECT rowid, embedding FROM message_vec")}
    got = {int(i): cache._codes[p].tobytes() for p, i in enumerate(cache._ids[:cache.size])}
    assert got == rows
    lists = cache._lists[:cache.size]
    assert np.array_equal(lists, np.sort(lists))  # list by list, the unlisted last
    assert np.array_equal(lists, cache._list_map.lookup(cache._ids[:cache.size]))
    # on one core each group is placed at once: the same cache
    monkeypatch.setattr(vector_cache, "_cores", lambda: 1)
    alone = VectorCache(filled._db.con, filled._db.vectors.dim)
    with filled._db.con:
        alone._read_partition(alone._part.stamp())
        assert alone._load_chunks()
    for name in ("_ids", "_codes", "_lists"):
        assert np.array_equal(getattr(alone, name)[:alone.size], getattr(cache, name)[:cache.size])


def test_groups_are_placed_beside_the_reads_without_a_buffer_overwritten(monkeypatch):
    """``_Placing``: a group read into a buffer is placed from it before the buffer is read into
    again, however slow the placing (here the helper thread sleeps on each group); the groups are
    placed in order; an error while placing is raised in the loading thread and stops the load."""
    import time

    from memsif_lite.db import vector_cache

    monkeypatch.setattr(vector_cache, "_cores", lambda: 2)
    placed: list[tuple[int, int, bytes]] = []
    threads: set[str] = set()

    def place(buf, a, b):
        time.sleep(0.002)
        threads.add(threading.current_thread().name)
        placed.append((a, b, buf.tobytes()))

    want = []
    with vector_cache._Placing(place, 16, True) as placing:
        for g in range(40):
            buf = placing.buffer()[:8 + g % 8]
            buf[:] = g
            placing.put(buf, g, g + 1)
            want.append((g, g + 1, bytes([g]) * len(buf)))
    assert placed == want
    assert threads == {"memsif-load"}

    def failing(buf, a, b):
        if a == 3:
            raise ValueError("a chunk of an unexpected shape")
    got = []
    with pytest.raises(ValueError, match="unexpected shape"):
        with vector_cache._Placing(failing, 4, True) as placing:
            for g in range(50):
                placing.buffer()
                placing.put(placing.buffer()[:4], g, g + 1)
                got.append(g)
    assert len(got) < 50  # stopped once the error was seen, not after reading every group


def test_inverse_norms_are_computed_by_the_searches_that_scan_them(filled, monkeypatch):
    """A full load computes no inverse norm; a search computes those of the blocks it scans and
    ranks exactly; a deletion moving a row not computed yet into a computed block, and rows
    appended after, keep every later ranking exact (as vec0's)."""
    from memsif_lite.db import vector_cache

    monkeypatch.setattr(vector_cache, "NORM_ROWS", 16)
    con = filled._db.con
    cache = filled._db.vectors
    for c in filled._db.caches:  # loaded again with blocks of 16
        c.invalidate()
    with con:
        cache.sync()
    assert cache.size == 2400 and not cache._normed.any()
    assert cache.search(query(3), 10) == exact(filled, query(3), 10)
    done = int(cache._normed.sum())
    assert 0 < done < len(cache._normed)  # a quarter of the lists scanned: some blocks, not all
    first_done = int(np.flatnonzero(cache._normed)[0])
    moved = cache._ids[first_done * 16]  # a row of a computed block, deleted: the last row moves in
    assert not cache._normed[(cache.size - 1) // 16]
    filled.forget(message_id=int(moved))
    filled.add_many(conversation(30, 5000))
    blocks = np.flatnonzero(cache._normed)  # every row of a block marked computed is
    rows = np.concatenate([np.arange(b * 16, min((b + 1) * 16, cache.size)) for b in blocks])
    assert np.array_equal(cache._inv[rows], inverse_norms(cache._codes[rows]))
    monkeypatch.setattr(partition, "SCAN_SHARE", 1.0)
    monkeypatch.setattr(partition, "MIN_SHARE", 1.0)
    for i in range(0, TOPICS, 7):
        assert cache.search(query(i), 10) == exact(filled, query(i), 10)
    assert cache._normed[:-(-cache.size // 16)].all()


def test_the_second_thread_is_kept_between_queries(filled):
    """The BM25 side of ``nearest_beside`` runs on a thread kept between queries (not one started
    per query, which costs the caller the wait until it is scheduled); an error on it is raised in
    the caller's thread and leaves it usable."""
    asks = [f"t{i}w0 t{i}w2 Ana" for i in range(0, TOPICS, 3)]
    filled.search(asks[0])  # loads the cache (serially)
    filled.search(asks[0])

    def beside_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "memsif-beside"]
    kept = beside_threads()
    assert len(kept) == 1
    for q in asks:
        filled.search(q, k=10)
        filled.context(q, budget_tokens=300)
    db = filled._db

    def boom() -> list[int]:
        raise apsw.SQLError("the BM25 side failed")

    with db.read():
        with pytest.raises(apsw.SQLError, match="BM25 side"):
            db.messages.nearest_beside(query(3), 10, boom)
        assert db.messages.nearest_beside(query(3), 10, lambda: 7)[1] == 7
    assert beside_threads() == kept


def test_context_scans_the_unit_caches_while_the_bm25_query_runs(filled, monkeypatch):
    """``context`` on a file past MIN_ROWS: the segment and trajectory rankings (their caches
    scanned, no SQL) run in the caller's thread while the BM25 query still runs in the second one,
    not after it, and the context is the one of the serial path."""
    from memsif_lite.retrieval import Retriever
    ask = "t5w0 t5w2 x35 Ana"
    filled.context(ask, budget_tokens=300)  # loads the caches
    monkeypatch.setattr(partition, "MIN_ROWS", 10**9)
    serial = filled.context(ask, budget_tokens=300).text
    monkeypatch.setattr(partition, "MIN_ROWS", 500)
    scanned = {"segment_vec": threading.Event(), "trajectory_vec": threading.Event()}
    during: dict[str, bool] = {}
    serial_bm25, serial_search = Retriever.bm25, VectorCache.search

    def bm25(self, *a, **k):
        for e in scanned.values():  # the BM25 side waits for the unit scans (in vain when they come after it)
            e.wait(timeout=3)
        during.update({t: e.is_set() for t, e in scanned.items()})
        return serial_bm25(self, *a, **k)

    def search(self, *a, **k):
        if self.table in scanned:
            scanned[self.table].set()
        return serial_search(self, *a, **k)

    monkeypatch.setattr(Retriever, "bm25", bm25)
    monkeypatch.setattr(VectorCache, "search", search)
    assert filled.context(ask, budget_tokens=300).text == serial
    assert during == {"segment_vec": True, "trajectory_vec": True}


def test_a_ctrl_c_as_the_load_ends_still_ends_its_helper(monkeypatch):
    """``_Placing``: a KeyboardInterrupt while the loading thread wakes the helper for the last
    time (the notify never happens) is raised once the helper has placed what was queued and ended
    — it does not wait on for ever, holding the buffers."""
    import time

    from memsif_lite.db import vector_cache

    monkeypatch.setattr(vector_cache, "_cores", lambda: 2)
    placed: list[int] = []
    placing = vector_cache._Placing(lambda buf, a, b: placed.append(a), 4, True)
    helper = placing._thread
    assert helper is not None
    with pytest.raises(KeyboardInterrupt):
        with placing:
            placing.put(placing.buffer(), 0, 1)
            time.sleep(0.3)  # the helper has placed it and waits for more

            def interrupted() -> None:
                raise KeyboardInterrupt
            placing._ready.notify = interrupted  # type: ignore[method-assign]
    helper.join(timeout=2)
    assert not helper.is_alive() and placed == [0]


def test_the_first_context_loads_the_unit_caches_beside_the_message_scan(filled, memory, monkeypatch):
    """At the first ``context`` after opening, the segment and trajectory caches are loaded (SQL)
    by the second thread, before its BM25 query, while the caller's thread scores the message
    cache (its first scan computes inverse norms); the context is the serial one. A failure
    there is raised in the caller's thread, which does not wait for ever on the unit rankings."""
    ask = "t3w0 t3w2 x21 Ana"
    monkeypatch.setattr(partition, "MIN_ROWS", 10**9)
    serial = filled.context(ask, budget_tokens=300).text
    filled.close()
    monkeypatch.setattr(partition, "MIN_ROWS", 500)
    units = ("segment_vec", "trajectory_vec")
    loaded = {t: threading.Event() for t in units}
    where: dict[str, str] = {}
    serial_sync, serial_search = VectorCache._sync_rows, VectorCache.search

    def sync_rows(self, full):
        got = serial_sync(self, full)
        if self.table in loaded and full:
            where[self.table] = threading.current_thread().name
            loaded[self.table].set()
        return got

    def search(self, *a, **k):
        if self.table == "message_vec":  # the caller's thread: slow until the unit caches are loaded (or 3 s)
            for e in loaded.values():
                e.wait(timeout=3)
        return serial_search(self, *a, **k)

    monkeypatch.setattr(VectorCache, "_sync_rows", sync_rows)
    monkeypatch.setattr(VectorCache, "search", search)
    mem = memory()
    assert mem.context(ask, budget_tokens=300).text == serial
    assert where == {t: "memsif-beside" for t in units}
    mem.close()

    from memsif_lite.db.structure import Structure

    def broken(self, level, *a):
        raise apsw.IOError("the segment cache could not be read")
    monkeypatch.setattr(Structure, "prepared_dense", broken)
    mem = memory()
    with pytest.raises(Exception, match="could not be read"):
        mem.context(ask, budget_tokens=300)
    mem.close()


def test_a_prepared_unit_scan_is_the_dense_ranking_and_only_inside_a_snapshot(filled):
    """``Structure.prepared_dense``: outside a read snapshot none (the two steps would read two
    states of the file); inside one, the same ranking as ``Structure.dense``."""
    db = filled._db
    for level in ("segment", "trajectory"):
        assert db.structure.prepared_dense(level, query(2), 8) is None
        with db.read():
            for i in range(0, TOPICS, 6):
                scan = db.structure.prepared_dense(level, query(i), 8)
                assert scan is not None and scan() == db.structure.dense(level, query(i), 8)


def test_the_second_thread_takes_the_unit_scans_when_it_is_free_first(filled, monkeypatch):
    """While the caller's thread still scores the message cache, the second thread, done with its
    BM25 query, takes the segment and trajectory scans; the context is the serial one."""
    ask = "t7w1 t7w3 x49 Ben"
    filled.context(ask, budget_tokens=300)  # loads the caches
    monkeypatch.setattr(partition, "MIN_ROWS", 10**9)
    serial = filled.context(ask, budget_tokens=300).text
    monkeypatch.setattr(partition, "MIN_ROWS", 500)
    units = ("segment_vec", "trajectory_vec")
    scanned = {t: threading.Event() for t in units}
    where: dict[str, str] = {}
    serial_search = VectorCache.search

    def search(self, *a, **k):
        if self.table == "message_vec":  # the caller's thread: slow, until the units are scanned (or 3 s)
            for e in scanned.values():
                e.wait(timeout=3)
        got = serial_search(self, *a, **k)
        if self.table in scanned:
            where[self.table] = threading.current_thread().name
            scanned[self.table].set()
        return got

    monkeypatch.setattr(VectorCache, "search", search)
    assert filled.context(ask, budget_tokens=300).text == serial
    assert where == {t: "memsif-beside" for t in units}


def test_the_rankings_overlapped_in_two_threads_are_those_of_one_after_the_other(filled, monkeypatch):
    """On a file past MIN_ROWS the BM25 query runs in a second thread while the cached rows are
    scored (``Messages.nearest_beside``): searches and contexts are the same as run serially, and
    an error in the BM25 thread is raised in the caller's."""
    from memsif_lite.retrieval import Retriever
    threads: list[str] = []
    serial_bm25 = Retriever.bm25

    def bm25(self, *a, **k):
        threads.append(threading.current_thread().name)
        return serial_bm25(self, *a, **k)

    monkeypatch.setattr(Retriever, "bm25", bm25)
    asks = [f"t{i}w0 t{i}w2 x{7 * i} Ana" for i in range(0, TOPICS, 5)] + ["y100 y2000", "nothing matches zzz"]
    filled.search(asks[0])  # loads the cache
    threads.clear()
    overlapped = [(filled.search(q, k=10), filled.context(q, budget_tokens=300).text) for q in asks]
    assert set(threads) == {"memsif-beside"}
    monkeypatch.setattr(partition, "MIN_ROWS", 10**9)
    threads.clear()
    assert [(filled.search(q, k=10), filled.context(q, budget_tokens=300).text) for q in asks] == overlapped
    assert "memsif-beside" not in threads
    monkeypatch.setattr(partition, "MIN_ROWS", 500)

    def boom() -> list[int]:
        raise apsw.SQLError("the BM25 side failed")

    db = filled._db
    with db.read():
        with pytest.raises(apsw.SQLError, match="BM25 side"):
            db.messages.nearest_beside(query(3), 10, boom)
        assert db.messages.nearest_beside(query(3), 10, lambda: 7) == (db.messages.nearest(query(3), 10), 7, [])


def test_an_interrupt_while_the_bm25_thread_runs_waits_for_it_and_leaves_the_connection_usable(filled, monkeypatch):
    """Ctrl-C in the caller while the second thread is still running SQL: the caller interrupts
    the connection and waits for the thread before raising KeyboardInterrupt, so the connection
    is not left busy in that thread nor in its read transaction (was: "Connection is busy in
    another thread", then every later write failed with "cannot start a transaction within a
    transaction")."""
    from memsif_lite.retrieval import Retriever
    filled.search("t3w0 t3w2 Ana", k=5)
    slow_bm25, started = Retriever.bm25, threading.Event()

    stopped: list[BaseException] = []

    def slow(self, *a, **k):
        started.set()
        try:
            self.db.con.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<8000000) "
                                "SELECT count(*) FROM c").fetchone()
        except apsw.InterruptError as e:  # the caller interrupted the connection at Ctrl-C
            stopped.append(e)
            raise
        return slow_bm25(self, *a, **k)

    monkeypatch.setattr(Retriever, "bm25", slow)
    def interrupt() -> None:
        started.wait(10)
        time.sleep(0.2)  # the caller has scored its rows by now and waits for the BM25 side
        os.kill(os.getpid(), signal.SIGINT)

    # Python's own handler (another test in the same run, a server or a Dask cluster, may have left its own)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            for _ in range(50):  # the signal lands while the main thread waits for the BM25 side
                filled.search("t3w0 t3w2 Ana", k=5)
    finally:
        signal.signal(signal.SIGINT, before)
    monkeypatch.setattr(Retriever, "bm25", slow_bm25)
    assert stopped  # the long query in the second thread was stopped, not waited out
    assert filled._db.con.get_autocommit()
    filled.add("Ana", "t1w1 hello again")
    assert filled.search("t3w0 t3w2 Ana", k=5)


def test_a_child_forked_while_the_thread_pool_lock_is_held_searches(filled, db):
    """A process forked while another thread holds the kept-thread pool's lock gets a new lock
    (``os.register_at_fork``): its overlapped searches do not hang."""
    from memsif_lite.db import messages as msgs
    want = filled.search("t5w0 t5w1 Ben", k=5)
    hold, release = threading.Event(), threading.Event()

    def holder() -> None:
        with msgs._BESIDE._lock:
            hold.set()
            release.wait(10)

    threading.Thread(target=holder, daemon=True).start()
    assert hold.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: its own memory on the file; a search past MIN_ROWS submits to the pool
        signal.alarm(20)
        try:
            with Memory(db, embedder=FakeEmbedder(), read_only=True) as mem:
                got = [mem.search("t5w0 t5w1 Ben", k=5) for _ in range(2)]
            os._exit(0 if got == [want, want] else 3)
        except BaseException:
            os._exit(4)
    release.set()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
