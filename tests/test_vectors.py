"""Schema 5: int8 vectors on disk, the migration from schema 3 files, and the in-process vector
cache (same ranking as vec0; never stale across processes)."""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder, raw
from memsif_lite import Memory, store
from memsif_lite.db import Database
from memsif_lite.int8 import cosine_distances, dequantize, quantize, squared_norms

FIXTURES = Path(__file__).parent / "fixtures"


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _database(path: Path, dim: int) -> Database:
    con = store.connect(path, dim=dim, initial_meta={"embedding_dim": str(dim)})
    return Database(con)


def _insert(db: Database, vecs: np.ndarray) -> list[int]:
    with db.write():
        return [db.messages.insert(speaker="A", text=f"m{i}", at="2024-01-01T00:00:00", session=None, source_id=None,
                                   content_hash=bytes(32), created_at="2024-01-01T00:00:00", vector=v)
                for i, v in enumerate(vecs)]


def test_quantisation_keeps_the_direction():
    v = _unit(np.random.default_rng(0), 200, 384)
    q = quantize(v)
    assert q.dtype == np.int8 and np.abs(q).max(axis=1).min() == 127  # per-vector scale: full range
    cos = np.einsum("ij,ij->i", dequantize(q), v)
    assert cos.min() > 0.999
    assert not quantize(np.zeros(8)).any()


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 2100), dim=st.sampled_from([1, 7, 384, 1023, 1024, 1536]),
       extreme=st.booleans())
@settings(max_examples=40, deadline=None)
def test_squared_norms_are_exact_at_any_dimension(seed, n, dim, extreme):
    """The cosine's denominators, computed in float32 blocks below dimension 1,024: equal to the
    integer sums for any codes a file may hold (-128 included), across block edges and above the
    dimension where float32 would round."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(-128, 128, size=(n, dim), dtype=np.int8)
    if extreme:  # the largest sums: every code at the edge, signs mixed (odd sums above 2**24 if float32 ran)
        codes = np.where(rng.random((n, dim)) < 0.5, np.int8(-128), np.int8(127)).astype(np.int8)
    want = (codes.astype(np.int64) ** 2).sum(axis=1).astype(np.float64)
    got = squared_norms(codes)
    assert got.dtype == np.float64 and np.array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), k=st.integers(1, 400), dup=st.booleans())
def test_cache_ranks_exactly_like_vec0(seed, n, k, dup):
    """Same ids, same distances (bit for bit) from the cache and from sqlite-vec's KNN; ties by id."""
    rng = np.random.default_rng(seed)
    vecs = _unit(rng, n, 16)
    if dup and n > 2:  # exact ties
        vecs[n // 2:] = vecs[: n - n // 2]
    with tempfile.TemporaryDirectory() as d:
        db = _database(Path(d) / "m.db", 16)
        try:
            _insert(db, vecs)
            q = vecs[int(rng.integers(n))] if rng.random() < 0.5 else _unit(rng, 1, 16)[0]
            with db.read():
                db.vectors.sync()
                cached = db.vectors.search(q, k)
            assert db.vectors.size == n
            exact = db.messages.knn("message_vec", q, k)
            assert [d for _, d in cached] == [d for _, d in exact]
            assert cached == sorted(cached, key=lambda x: (x[1], x[0]))
            # ids agree except among equal distances cut at the k boundary
            last = cached[-1][1] if cached else None
            assert [x for x in cached if x[1] != last] == [x for x in exact if x[1] != last]
        finally:
            db.close()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 400), k=st.integers(1, 120), zeros=st.integers(0, 5),
       kind=st.sampled_from(["lattice", "gaussian", "near"]), zero_query=st.booleans())
def test_cache_ranking_is_every_row_ranked_exactly(seed, n, k, zeros, kind, zero_query):
    """The cache keeps only the rows a float32 pass leaves near the k-th and ranks those exactly:
    the result is every row's exact distance ranked with ties by id, also with many equal distances
    (small integer vectors), distances a float32 pass cannot tell apart (one code, each row with one
    entry moved by one: fails without NEAR_MARGIN), all-zero rows (NaN: last) and an all-zero query."""
    rng = np.random.default_rng(seed)
    dim = 384 if kind == "near" else 6
    if kind == "near":
        base = quantize(rng.standard_normal(dim).astype(np.float32)).astype(np.int16)
        codes = np.repeat(base[None], n, axis=0)
        codes[np.arange(n), rng.integers(0, dim, n)] += rng.choice([-1, 1], n).astype(np.int16)
        vecs = np.clip(codes, -127, 127).astype(np.float32)
    else:
        drawn = rng.integers(-2, 3, size=(n, dim)) if kind == "lattice" else rng.standard_normal((n, dim))
        vecs = drawn.astype(np.float32)
    vecs[rng.choice(n, size=min(zeros, n), replace=False)] = 0.0
    q = np.zeros(dim, np.float32) if zero_query else rng.standard_normal(dim).astype(np.float32)
    if kind == "near" and not zero_query:
        q = vecs[0] + rng.standard_normal(dim).astype(np.float32) * 0.3
    with tempfile.TemporaryDirectory() as d:
        db = _database(Path(d) / "m.db", dim)
        try:
            ids = np.array(_insert(db, vecs), dtype=np.int64)
            with db.read():
                db.vectors.sync()
                got = db.vectors.search(q, k)
        finally:
            db.close()
    codes, qc = quantize(vecs), quantize(q)
    dots = codes.astype(np.int64) @ qc.astype(np.int64)
    dist = cosine_distances(dots.astype(np.float32), squared_norms(codes), float(qc.astype(np.int64) @ qc))
    order = np.lexsort((ids, dist))[:k]
    want = list(zip(ids[order].tolist(), dist[order].tolist(), strict=True))
    assert [m for m, _ in got] == [m for m, _ in want]
    assert np.array_equal(np.array([x for _, x in got], np.float32), np.array([x for _, x in want], np.float32),
                          equal_nan=True)


def test_cache_follows_this_process_commits_and_rollbacks(tmp_path):
    db = _database(tmp_path / "m.db", 16)
    try:
        vecs = _unit(np.random.default_rng(1), 6, 16)
        ids = _insert(db, vecs[:3])
        assert [m for m, _ in db.messages.nearest(vecs[0], 10)][0] == ids[0]  # loads the cache
        with pytest.raises(RuntimeError):
            with db.write():
                db.messages.insert(speaker="A", text="rolled back", at="2024-01-01T00:00:00", session=None,
                                   source_id=None, content_hash=bytes(32), created_at="x", vector=vecs[3])
                raise RuntimeError("boom")
        assert sorted(m for m, _ in db.messages.nearest(vecs[3], 10)) == sorted(ids)
        more = _insert(db, vecs[4:])
        with db.write():
            db.messages.delete(ids[1])
        got = sorted(m for m, _ in db.messages.nearest(vecs[0], 10))
        assert got == sorted([ids[0], ids[2], *more])
        assert db.vectors.size == 4
    finally:
        db.close()


def test_release_v3_file_is_migrated_in_place(tmp_path, fake_embedder):
    """A file made by the release before schema 6 (fixtures/release_v3.db.gz, see the JSON's
    made_by) opens, converts to int8 vectors, and searches as before within quantisation."""
    path = tmp_path / "old.db"
    path.write_bytes(gzip.decompress((FIXTURES / "release_v3.db.gz").read_bytes()))
    expected = json.loads((FIXTURES / "release_v3_expected.json").read_text())
    with raw(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 3
        before = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("messages", "message_vec", "segment_vec", "trajectory_vec", "fact_vec")}
    with Memory(path, embedder=fake_embedder) as mem:
        assert mem.check() == []
        with raw(path) as con:
            assert {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in before} == before
        for q, hits in expected["search"].items():
            got = mem.search(q, k=10)
            want = [h[0] for h in hits]
            assert got[0].id == want[0], q
            assert len({h.id for h in got[:5]} & set(want[:5])) >= 4, q
            assert [h.score for h in got] == pytest.approx([h[1] for h in hits], abs=2 / 60 ** 2), q
        for q, want in expected["segment_search"].items():
            assert [h.id for h in mem.search(q, k=5, level="segment")][0] == want[0], q
        mem.add("Maya", "after the upgrade I still live in Porto")
    with raw(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == store.latest_version()
        assert con.execute("SELECT count(*) FROM messages WHERE tokens IS NULL OR tokens < 1").fetchone()[0] == 0
        assert {len(b) for (b,) in con.execute("SELECT vec_sum FROM segments")} == {0}  # in segment_sums until linked
        assert {len(b) for (b,) in con.execute("SELECT vec_sum FROM segment_sums")} == {4 * 32}
        assert con.execute("SELECT count(*) FROM sqlite_schema WHERE name='_v5_stash'").fetchone()[0] == 0
        # the stored int8 codes are the quantised passages
        text = dict(con.execute("SELECT id, speaker || ': ' || text FROM messages"))
        for mid, blob in con.execute("SELECT rowid, vec_to_json(embedding) FROM message_vec"):
            assert json.loads(blob) == quantize(fake_embedder.embed([text[mid]], kind="passage")[0]).tolist()


def _writer(path: str, rounds: int, out) -> None:
    """``out`` is a pipe end: ``send`` puts the message in the pipe before returning (a
    ``multiprocessing.Queue`` would flush later, from a thread, and break the ordering)."""
    rng = random.Random(7)
    alive: list[int] = []
    with Memory(path, embedder=FakeEmbedder()) as mem:
        for r in range(rounds):
            mid = mem.add("W", f"unique{r} marker{r} words")
            out.send(("add", mid, r))
            alive.append(mid)
            if r % 3 == 2 and len(alive) > 2:
                victim = alive.pop(rng.randrange(len(alive) - 1))  # never the newest: ids are not reused
                out.send(("forgetting", victim, -1))  # from now on it may be gone
                mem.forget(message_id=victim)
                out.send(("forgot", victim, -1))  # committed: it must be gone
    out.send(("done", 0, 0))


def test_two_processes_cache_never_stale(tmp_path):
    """One process writes (adds, forgets); another queries through its vector cache. Whatever
    was committed before a query began is found, and nothing forgotten before it is returned."""
    path = tmp_path / "shared.db"
    Memory(path, embedder=FakeEmbedder()).close()
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    rounds = 1000
    proc = ctx.Process(target=_writer, args=(str(path), rounds, send))
    proc.start()
    emb = FakeEmbedder()
    db = _database(path, emb.dim)
    alive: dict[int, np.ndarray] = {}
    forgotten: set[int] = set()
    done, checks = False, 0

    def apply(msgs: list) -> None:
        nonlocal done
        for op, mid, r in msgs:
            if op == "add":
                alive[mid] = emb.embed([f"W: unique{r} marker{r} words"], kind="passage")[0]
            elif op == "forgetting":
                alive.pop(mid)
            elif op == "forgot":
                forgotten.add(mid)
            else:
                done = True

    def drain(wait: float) -> list:
        out = []
        while recv.poll(wait):
            out.append(recv.recv())
            wait = 0
        return out

    try:
        while not done or checks < rounds:
            apply(drain(30 if not alive else 0))  # all of it committed before the query begins
            newest = max(alive)
            got = db.messages.nearest(alive[newest], 100_000)
            late = drain(0)  # a forget announced up to now may have committed before the query
            ids = {m for m, _ in got}
            doomed = {mid for op, mid, _ in late if op == "forgetting"}
            # the newest this side knows of may be forgotten meanwhile (the writer only spares its own newest)
            assert got[0][0] == newest or newest in doomed or got[0][1] == got[1][1]
            assert set(alive) - doomed <= ids
            assert not (forgotten & ids)
            apply(late)
            checks += 1
        proc.join(120)  # the writer is done: one last query sees exactly what is left
        assert {m for m, _ in db.messages.nearest(alive[max(alive)], 100_000)} == set(alive)
        assert db.vectors.size == len(alive)
    finally:
        db.close()
        proc.join(120)
    assert proc.exitcode == 0


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 40))
def test_segment_cache_follows_rewrites_here_and_in_another_connection(seed, steps):
    """Segment vectors are rewritten in place as segments grow: the cache of the writing
    connection applies its commits, another connection's cache reloads; both rank like vec0."""
    from collections import Counter

    from memsif_lite.db import Unit

    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.db"
        a, b = _database(path, 16), _database(path, 16)
        try:
            live: list[int] = []
            overlaid = 0
            for _ in range(steps):
                q = _unit(rng, 1, 16)[0]
                for db in (a, b):  # load (or check) both caches before the next write
                    db.structure.dense("segment", q, 5)
                with a.write():
                    op = rng.random()
                    if op < 0.4 or not live:
                        live.append(a.structure.create_segment(_unit(rng, 1, 16)[0], [], "2024-01-01T00:00:00"))
                    elif op < 0.85:
                        uid = live[int(rng.integers(len(live)))]
                        a.structure.save("segment", Unit(uid, 2, rng.standard_normal(16), Counter(), "a", "b"))
                    else:
                        a.structure.delete_unit("segment", live.pop(int(rng.integers(len(live)))))
                    # inside the transaction: the staged rewrites overlaid on the cache rank like vec0
                    inside = a.structure.caches["segment"]
                    if inside.usable():
                        overlaid += 1
                        assert inside.search(q, 50) == sorted(a.structure.knn("segment_vec", q, 50),
                                                              key=lambda x: (x[1], x[0]))
                    assert sorted(a.structure.dense("segment", q, 50)) == sorted(live)
                for db in (a, b):
                    got = db.structure.caches["segment"]
                    ranked = db.structure.dense("segment", q, 50)
                    exact = [u for u, _ in db.structure.knn("segment_vec", q, 50)]
                    assert sorted(ranked) == sorted(exact) == sorted(live)
                    assert got.size == len(live)
                    assert [x[1] for x in got.search(q, 50)] == [x[1] for x in db.structure.knn("segment_vec", q, 50)]
            assert overlaid == steps  # every transaction searched its own staged rewrites from the cache
        finally:
            a.close()
            b.close()


def test_a_row_rewritten_in_place_is_ranked_by_its_new_norm(tmp_path):
    """A rewrite (``set``) changes a cached row's code and the inverse norm the float32 first pass
    ranks by: a far segment with a large norm (a flat code) rewritten to the query's direction
    (a one-entry code, a quarter of that norm) is the nearest, also with k below the row count."""
    from collections import Counter

    from memsif_lite.db import Unit

    db = _database(tmp_path / "m.db", 16)
    try:
        q = np.eye(16, dtype=np.float32)[0]
        near = q + 0.8 * np.eye(16, dtype=np.float32)[1]
        with db.write():
            far = db.structure.create_segment(-np.ones(16, np.float32), [], "2024-01-01T00:00:00")
            others = [db.structure.create_segment(near, [], "2024-01-01T00:00:00") for _ in range(3)]
        cache = db.structure.caches["segment"]
        assert db.structure.dense("segment", q, 1) == [others[0]]  # loads the cache
        with db.write():
            db.structure.save("segment", Unit(far, 2, q.astype(np.float64), Counter(), "a", "b"))
        assert cache.usable() and cache.size == 4
        with db.read():
            assert cache.search(q, 1) == db.structure.knn("segment_vec", q, 1) == [(far, 0.0)]
    finally:
        db.close()


def test_a_cache_loaded_inside_a_rolled_back_transaction_keeps_no_ghost(tmp_path):
    """A merge reloads the caches inside its transaction (after rewriting rows under them); if
    that transaction rolls back, rows it read must not survive in the cache."""
    db = _database(tmp_path / "m.db", 16)
    try:
        rng = np.random.default_rng(3)
        keep = db.structure.caches["segment"]
        with db.write():
            real = db.structure.create_segment(_unit(rng, 1, 16)[0], [], "2024-01-01T00:00:00")
        q = _unit(rng, 1, 16)[0]
        assert db.structure.dense("segment", q, 10) == [real]
        with pytest.raises(RuntimeError):
            with db.write():
                ghost = db.structure.create_segment(q, [], "2024-01-02T00:00:00")
                keep.invalidate()  # as a merge does after rewriting rows
                assert db.structure.dense("segment", q, 10)[0] == ghost  # reloaded inside the transaction
                raise RuntimeError("the merge failed")
        assert db.structure.dense("segment", q, 10) == [real]
        assert [u for u, _ in db.structure.knn("segment_vec", q, 10)] == [real]
    finally:
        db.close()


def test_an_id_freed_here_and_reused_by_another_connection_is_found(tmp_path):
    """After the newest message is deleted, another process stores one: since schema 10 it never
    takes the freed id (sql/0010), and this process's cache must find it either way."""
    a, b = _database(tmp_path / "m.db", 16), _database(tmp_path / "m.db", 16)
    try:
        vecs = _unit(np.random.default_rng(7), 4, 16)
        ids = _insert(a, vecs[:3])
        assert len(a.messages.nearest(vecs[0], 10)) == 3  # a's cache is loaded
        with a.write():
            a.messages.delete(ids[-1])
        [again] = _insert(b, vecs[3:])
        assert again > ids[-1]  # never the freed id
        got = [m for m, _ in a.messages.nearest(vecs[3], 10)]
        assert got[0] == again and sorted(got) == sorted(m for m, _ in a.messages.knn("message_vec", vecs[3], 10))
    finally:
        a.close()
        b.close()


def _brute(vecs: dict[int, np.ndarray], q: np.ndarray, k: int, ok) -> list[tuple[int, float]]:
    """The exact filtered ranking, written out: every admitted row's cosine distance as sqlite-vec
    computes it (int8 codes, integer dot products, double, rounded to float32), ties by id."""
    qc = quantize(q).astype(np.int64)
    out = []
    for mid, v in vecs.items():
        if ok(mid):
            c = quantize(v).astype(np.int64)
            den = np.sqrt(float(c @ c)) * np.sqrt(float(qc @ qc))
            out.append((mid, float(np.float32(1.0 - float(c @ qc) / den))))
    return sorted(out, key=lambda x: (x[1], x[0]))[:k]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120), k=st.integers(1, 60),
       window=st.tuples(st.one_of(st.none(), st.integers(0, 40)), st.one_of(st.none(), st.integers(0, 40))),
       by_id=st.booleans(), staged=st.integers(0, 5), deleted=st.integers(0, 5))
def test_masked_cache_search_is_the_exact_filtered_ranking(seed, n, k, window, by_id, staged, deleted):
    """A filtered search through the cache (a time window compared beside it, an id set) gives the
    ranking of a brute-force pass over the admitted rows, bit for bit — also inside a write
    transaction, over what it staged (added and deleted rows) — and the same as vec0's KNN with
    ``rowid IN (...)``. Times repeat (equal times at both ends of a window) and vectors repeat (ties)."""
    from memsif_lite.db.vector_cache import Allowed

    rng = np.random.default_rng(seed)
    vecs = _unit(rng, n + staged, 16)
    if n > 3:
        vecs[n // 2: n // 2 + 2] = vecs[:2]  # exact ties
    day = [f"2024-01-{1 + int(d) // 2:02d}T{12 * (int(d) % 2):02d}:00:00" for d in rng.integers(0, 40, n + staged)]
    since, until = (None if w is None else f"2024-01-{1 + w // 2:02d}T{12 * (w % 2):02d}:00:00" for w in window)
    with tempfile.TemporaryDirectory() as d:
        db = _database(Path(d) / "m.db", 16)
        try:
            with db.write():
                ids = [db.messages.insert(speaker="A", text=f"m{i}", at=day[i], session=None, source_id=None,
                                          content_hash=bytes(32), created_at="2024-01-01T00:00:00", vector=vecs[i])
                       for i in range(n)]
            times = dict(zip(ids, day, strict=False))
            live = dict(zip(ids, vecs, strict=False))
            chosen = set(rng.choice(ids, size=max(1, n // 3), replace=False).tolist()) if by_id else None
            allowed = Allowed(since=since, until=until,
                              ids=None if chosen is None else np.array(sorted(chosen), dtype=np.int64))

            def ok(mid: int) -> bool:
                return ((since is None or times[mid] >= since) and (until is None or times[mid] <= until)
                        and (chosen is None or mid in chosen))

            q = vecs[int(rng.integers(n))] if rng.random() < 0.5 else _unit(rng, 1, 16)[0]
            got = db.messages.cached_nearest(q, k, allowed)
            assert got == _brute(live, q, k, ok)
            sub = "SELECT id FROM messages WHERE " + " AND ".join(
                ["1"] + ([f"at >= '{since}'"] if since else []) + ([f"at <= '{until}'"] if until else [])
                + ([f"id IN ({','.join(map(str, sorted(chosen)))})"] if chosen is not None else []))
            exact = db.messages.knn("message_vec", q, k, only=(sub, []))
            assert [x for _, x in got] == [x for _, x in exact]
            last = got[-1][1] if got else None  # ids agree except among equal distances cut at k
            assert [x for x in got if x[1] != last] == [x for x in exact if x[1] != last]
            with db.write():  # staged rows: added ones (with their times) and deleted ones are overlaid
                for i in range(n, n + staged):
                    mid = db.messages.insert(speaker="A", text=f"m{i}", at=day[i], session=None, source_id=None,
                                             content_hash=bytes(32), created_at="x", vector=vecs[i])
                    times[mid], live[mid] = day[i], vecs[i]
                for mid in list(live)[:deleted]:
                    db.messages.delete(mid)
                    live.pop(mid)
                assert db.messages.cached_nearest(q, k, allowed) == _brute(live, q, k, ok)
            assert db.messages.cached_nearest(q, k, allowed) == _brute(live, q, k, ok)  # and once committed
        finally:
            db.close()


def test_a_time_the_cache_cannot_compare_sends_time_windows_to_vec0(tmp_path):
    """A stored time longer than any memsif writes (an edited file) cannot be held exactly beside
    the cache: time windows are then answered by vec0 — the same messages, filtered as SQLite
    compares text — while id sets and unfiltered searches stay in the cache."""
    from memsif_lite.db.vector_cache import Allowed
    from memsif_lite.filters import MessageFilter

    db = _database(tmp_path / "m.db", 16)
    try:
        vecs = _unit(np.random.default_rng(5), 6, 16)
        ids = _insert(db, vecs)
        with db.write():
            db.con.execute("UPDATE messages SET at='2024-01-01T00:00:00.000000+00:00 (edited)' WHERE id=?", (ids[2],))
        db.vectors.invalidate()
        window = Allowed(until="2024-01-01T00:00:00")
        assert db.messages.cached_nearest(vecs[0], 10) is not None
        assert db.messages.cached_nearest(vecs[0], 10, window) is None
        assert db.messages.cached_nearest(vecs[0], 10, Allowed(ids=np.array(ids[:2]))) is not None
        flt = MessageFilter.build(until="2024-01-01T00:00:00")
        with db.read():
            got = db.filters.dense(vecs[2], 10, flt)
        assert sorted(got) == sorted(set(ids) - {ids[2]})  # the edited time sorts after the bound, as text
    finally:
        db.close()
