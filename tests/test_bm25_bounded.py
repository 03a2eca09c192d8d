"""BM25 bounded on large files (memsif_lite.db.bm25): under ``TERM_CAP`` messages the query is the
plain OR of the question's words, unchanged; above it (lowered here) a word in more than
``TERM_CAP`` rows only re-ranks the rows of the rarer words, with their plain-OR scores, and
rows holding only such words come after, from the most recent ``TERM_CAP`` messages."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder, raw
from memsif_lite import Memory
from memsif_lite.db import Database, bm25
from memsif_lite.db.messages import index_fulltext
from memsif_lite.filters import MessageFilter
from memsif_lite.retrieval import SPEAKER_WEIGHT, fts_query

N = 60
#: "coffee" is in 50 rows, "garden" in about half, "castle" in 3, "violin" in 2
RARE = {"castle": (3, 17, 41), "violin": (8, 50)}
FILLER = ["morning", "walk", "friend", "book", "music", "rain", "cooking", "travel", "weekend", "movie"]
VOCAB = ["coffee", "garden", "castle", "violin", *FILLER[:4], "absent"]
# what memsif ran before the bound (the plain OR, every matching row scored)
PLAIN = "SELECT rowid FROM message_fts WHERE message_fts MATCH ? ORDER BY bm25(message_fts, ?, 1.0) LIMIT ?"
PLAIN_SCORED = ("SELECT rowid, bm25(message_fts, ?, 1.0) FROM message_fts WHERE message_fts MATCH ? "
                "ORDER BY bm25(message_fts, ?, 1.0)")


def _text(i: int, rng: random.Random) -> str:
    words = rng.sample(FILLER, rng.randint(2, 6))
    if i % 6 != 0:
        words.append("coffee")
    if rng.random() < 0.5:
        words.append("garden")
    words += [w for w, rows in RARE.items() if i in rows]
    rng.shuffle(words)
    return "We talked about " + " and ".join(words) + "."


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    rng = random.Random(7)
    p = tmp_path_factory.mktemp("bm25") / "memory.db"
    with Memory(p, embedder=FakeEmbedder()) as mem:
        mem.add_many([{"speaker": "Ana" if i % 2 else "Leo", "text": _text(i, rng),
                       "at": f"2024-01-01T{i // 60:02d}:{i % 60:02d}:00"} for i in range(1, N + 1)])
    return p


def _plain(con, terms: list[str], depth: int) -> list[int]:
    return [r for (r,) in con.execute(PLAIN, (bm25.or_query(terms), SPEAKER_WEIGHT, depth))]


def _scores(con, terms: list[str]) -> dict[int, float]:
    return dict(con.execute(PLAIN_SCORED, (SPEAKER_WEIGHT, bm25.or_query(terms), SPEAKER_WEIGHT)))


def _holding(con, word: str) -> set[int]:
    return {r for (r,) in con.execute("SELECT rowid FROM message_fts WHERE message_fts MATCH ?", (f'"{word}"',))}


def test_under_the_cap_the_bounded_query_is_the_plain_or(path):
    questions = ["Did Ana drink coffee at the castle?", "coffee garden", "What about the violin and the garden?",
                 "Who likes music, books and rain?", "castle", "Ana", "an absent word", "coffee"]
    with raw(path) as con:  # read-only: nothing on the query path writes
        db = Database(con)
        assert bm25.common_terms(con, ["coffee", "garden"]) == []
        for q in questions:
            terms = [t.strip('"') for t in (fts_query(q) or "").split(" OR ") if t]
            for depth in (1, 3, 10, 50, 200):
                assert db.messages.bm25(terms, SPEAKER_WEIGHT, depth) == _plain(con, terms, depth), (q, depth)


def test_above_the_cap_a_common_word_only_reranks_the_rare_words_rows(path, monkeypatch):
    monkeypatch.setattr(bm25, "TERM_CAP", 30)
    with raw(path) as con:
        coffee, garden = _holding(con, "coffee"), _holding(con, "garden")
        assert len(coffee) == 50 and 10 < len(garden) <= 30 and _holding(con, "castle") == set(RARE["castle"])
        assert bm25.common_terms(con, ["castle", "coffee", "garden", "absent"]) == ["coffee"]
        terms = ["coffee", "castle", "violin"]
        rare = set(RARE["castle"]) | set(RARE["violin"])
        got = bm25.ranked(con, terms, SPEAKER_WEIGHT, len(rare))
        # the rows of the rare words, in the plain OR's order: coffee's weight is still in their scores
        assert got == [r for r in _plain(con, terms, 200) if r in rare]
        # more places than the rare words fill: rows holding only coffee follow, from the recent window
        more = bm25.ranked(con, terms, SPEAKER_WEIGHT, 20)
        assert more[:len(rare)] == got and len(more) == 20 and len(set(more)) == 20
        assert all(r > N - 30 and r in coffee for r in more[len(rare):])
        only_common = bm25.ranked(con, ["coffee"], SPEAKER_WEIGHT, 200)
        assert set(only_common) == {r for r in coffee if r > N - 30}
        assert only_common == [r for r in _plain(con, ["coffee"], 200) if r > N - 30]
        assert bm25.ranked(con, ["absent", "coffee"], SPEAKER_WEIGHT, 5) == only_common[:5]


@settings(max_examples=60, deadline=None)
@given(terms=st.lists(st.sampled_from(VOCAB), min_size=1, max_size=5, unique=True),
       cap=st.integers(1, N + 5), depth=st.integers(1, 70))
def test_the_rows_of_the_rarer_words_keep_their_plain_scores_and_order(path, terms, cap, depth):
    with raw(path) as con:
        saved, bm25.TERM_CAP = bm25.TERM_CAP, cap
        try:
            common = bm25.common_terms(con, terms)
            got = bm25.ranked(con, terms, SPEAKER_WEIGHT, depth)
        finally:
            bm25.TERM_CAP = saved
        scores = _scores(con, terms)
        assert len(got) == len(set(got)) <= depth and set(got) <= set(scores)
        if not common:
            assert got == _plain(con, terms, depth)
            return
        assert all(len(_holding(con, t)) > cap for t in common)
        assert all(len(_holding(con, t)) <= cap for t in terms if t not in common)
        rare = set().union(*(_holding(con, t) for t in terms if t not in common))
        head = [r for r in got if r in rare]
        assert got[:len(head)] == head  # the rare words' rows first...
        assert [scores[r] for r in head] == sorted(scores[r] for r in head)  # ...by their plain scores...
        cut = scores[head[-1]] if len(head) == depth else float("inf")
        assert all(scores[r] >= cut - 1e-9 for r in rare - set(head))  # ...the best of them
        assert len(head) == min(depth, len(rare))
        assert all(r > N - cap for r in got[len(head):])  # then only the recent window


def test_a_filter_with_too_few_rare_rows_gets_the_plain_filtered_ranking(path, monkeypatch):
    monkeypatch.setattr(bm25, "TERM_CAP", 30)
    with raw(path) as con:
        db = Database(con)
        ana = MessageFilter.build(speakers="Ana")
        assert ana is not None
        terms = ["castle", "coffee"]
        filtered = db.filters.bm25(terms, SPEAKER_WEIGHT, 2, ana)
        assert filtered == [r for r in _plain(con, terms, 200) if r % 2 and r in RARE["castle"]][:2]
        wide = db.filters.bm25(terms, SPEAKER_WEIGHT, 10, ana)  # 3 castle rows, one of them Ana's: all rows
        monkeypatch.setattr(bm25, "TERM_CAP", 10**6)
        assert wide == db.filters.bm25(terms, SPEAKER_WEIGHT, 10, ana)
        assert len(wide) == 10 and all(r % 2 for r in wide)


def test_a_read_only_memory_searches_with_the_bound(path, monkeypatch):
    monkeypatch.setattr(bm25, "TERM_CAP", 30)
    with Memory(path, embedder=FakeEmbedder(), read_only=True) as mem:
        hits = mem.search("castle coffee", k=3)
        assert {h.id for h in hits} & set(RARE["castle"])


def test_remembered_common_words_follow_every_write(tmp_path, monkeypatch):
    """CommonWords gives common_terms' verdict after this connection's writes (committed or rolled
    back) and another connection's commits."""
    monkeypatch.setattr(bm25, "TERM_CAP", 5)
    p = tmp_path / "m.db"
    lines = [{"speaker": "Ana", "text": f"tea number {i} at the castle", "at": f"2024-01-01T00:{i:02d}:00"}
             for i in range(8)]
    words, terms = bm25.CommonWords(), ["tea", "castle", "violin", "tea"]
    with Memory(p, embedder=FakeEmbedder()) as mem:
        con = mem._db.con

        def agrees() -> list[str]:
            with mem._db.read():
                got = words.of(con, terms)
                assert got == bm25.common_terms(con, terms) == words.of(con, terms)
                return got

        mem.add_many(lines[:4])
        assert agrees() == []  # no id above the cap yet
        mem.add_many(lines[4:])
        assert agrees() == ["tea", "castle", "tea"]
        mem.add_many([{"speaker": "Leo", "text": f"violin {i}", "at": "2024-01-02T00:00:00"} for i in range(6)])
        assert agrees() == ["tea", "castle", "violin", "tea"]
        with pytest.raises(RuntimeError), mem._db.write():  # a word indexed, then rolled back
            for mid in range(100, 106):
                index_fulltext(con, mid, "Ana", "quartet")
            assert words.of(con, ["quartet"]) == bm25.common_terms(con, ["quartet"]) == ["quartet"]
            raise RuntimeError("rolled back")
        assert agrees() == ["tea", "castle", "violin", "tea"]
        with mem._db.read():
            assert words.of(con, ["quartet"]) == []
        for mid in range(1, 5):
            mem.forget(message_id=mid)
        assert agrees() == ["violin"]
        with Memory(p, embedder=FakeEmbedder()) as other:  # another connection commits
            other.add_many([dict(d, text=d["text"] + " again") for d in lines])
        assert agrees() == ["tea", "castle", "violin", "tea"]
