"""BM25 over ``message_fts``, bounded on large files.

The query of a question is the OR of its words (:func:`memsif_lite.retrieval.query_terms`), ranked
by FTS5's ``bm25()``. FTS5 scores every row the OR matches before it keeps the best ``depth``, so
its cost is the sum of the words' posting lists: at a million messages a word such as a speaker's
name or "like" is in over 100,000 rows, and scoring a row costs ~0.6 µs where walking one costs
~0.04 µs (2026-12-02, 1M rows of LoCoMo text: the OR of a question took 80–117 ms CPU p50).

So a word whose posting list holds more than :data:`TERM_CAP` rows (a *common* word) no longer
chooses rows, only scores them:

* while the file has at most :data:`TERM_CAP` messages (by the highest id), no word can be common
  and the query is the plain OR, unchanged;
* otherwise each word's rows are counted, at most ``TERM_CAP + 1`` of them (FTS5 walks the list
  without scoring; the word goes through the table's own tokenizer — stemming, CJK pairs, phrases
  of several tokens — exactly as the OR would match it);
* the rows holding a rarer word are ranked in two parts, those that also hold a common word
  (``rare AND common``, every word named once) and those that do not (the rarer words alone,
  keeping only the rows that cannot hold a common word: see :func:`_rare_only`), so each row's
  score is its score under the plain OR (``bm25()`` sums over the words a row holds, with each
  word's idf from its whole list) up to the last bits of a sum taken in another order (the common
  words last), and the two parts merged are the plain OR's ranking of those rows but for such
  near-ties (ties by rowid);
* rows that hold only common words come after them, and only when the rarer words fill fewer than
  ``depth`` places (or there is none): from the plain OR over the most recent :data:`TERM_CAP`
  messages, so that no query scores more than a bounded number of rows.

With a filter (:meth:`memsif_lite.db.filtering.Filtering.bm25`) the same two parts run with the
filter; when they fill fewer than ``depth`` places the filtered plain OR runs instead (its result
is then exactly the unbounded one: a narrow filter may hold few rows with a rarer word).

Everything here is a read: it runs on read-only connections as well.
"""

from __future__ import annotations

from typing import Any, Sequence

import apsw

from .base import highest_message_id

__all__ = ["TERM_CAP", "or_query", "ranked", "common_terms", "CommonWords"]

#: posting-list length (rows) above which a query word only re-ranks the rows of the rarer words;
#: also the size of the recent window the rows holding only such words are drawn from. Chosen on
#: 1M rows of LoCoMo text (benchmarks/README.md, "BM25 bounded at 1M"): 50,000 kept the plain
#: OR's top 50 (overlap 1.000 on 200 questions) at 0.35–0.42× its CPU time p50, 0.25–0.34× p95;
#: 20,000 cost 0.28–0.33× p50 at an overlap of 0.975.
TERM_CAP = 50_000

_SCORE = "bm25(message_fts, ?, 1.0)"


def or_query(terms: Sequence[str]) -> str:
    """The FTS5 OR of ``terms``, each quoted (a string, never syntax)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def common_terms(con: Any, terms: Sequence[str]) -> list[str]:
    """The ``terms`` whose posting lists hold more than :data:`TERM_CAP` rows of ``message_fts``;
    none, without counting, while no message id exceeds it. Each count walks at most
    ``TERM_CAP + 1`` rows."""
    cap = TERM_CAP
    if highest_message_id(con) <= cap:
        return []
    sql = "SELECT count(*) FROM (SELECT 1 FROM message_fts WHERE message_fts MATCH ? LIMIT ?)"
    return [t for t in terms if con.execute(sql, (or_query([t]), cap + 1)).fetchone()[0] > cap]


class CommonWords:
    """:func:`common_terms` remembered for one connection while nothing is written: each word's
    verdict is kept until this connection writes (``total_changes``) or another one commits
    (``PRAGMA data_version``); inside a write transaction nothing is kept (it may be rolled back).
    Questions keep asking about the same people and things: counting a speaker's name walks
    ``TERM_CAP`` rows (about 2 ms at a million messages) every time."""

    def __init__(self) -> None:
        self._stamp: tuple[int, int, int] | None = None
        self._common: dict[str, bool] = {}

    def of(self, con: Any, terms: Sequence[str]) -> list[str]:
        if con.txn_state() >= apsw.SQLITE_TXN_WRITE:
            return common_terms(con, terms)
        stamp = (int(con.total_changes()), int(con.execute("PRAGMA data_version").fetchone()[0]), TERM_CAP)
        if stamp != self._stamp:
            self._stamp, self._common = stamp, {}
        todo = [t for t in dict.fromkeys(terms) if t not in self._common]
        if todo:
            common = set(common_terms(con, todo))
            self._common.update((t, t in common) for t in todo)
        return [t for t in terms if self._common[t]]


def ranked(con: Any, terms: Sequence[str], speaker_weight: float, depth: int,
           where: tuple[str, Sequence[Any]] | None = None, words: CommonWords | None = None) -> list[int]:
    """The best ``depth`` message ids for ``terms`` by BM25, best first (see the module docstring).
    ``where``: a condition on the joined message row ``m`` and its arguments (a filter); ``words``:
    the connection's remembered verdicts on which words are common."""
    if not terms or depth <= 0:
        return []
    plain = or_query(terms)
    common = words.of(con, terms) if words is not None else common_terms(con, terms)
    if not common:
        return [r for r, _ in _match(con, plain, speaker_weight, depth, where)]
    rare = or_query([t for t in terms if t not in common])
    got: list[int] = []
    if len(common) < len(terms):
        both = _match(con, f"({rare}) AND ({or_query(common)})", speaker_weight, depth, where)
        got = [r for r, _ in sorted(both + _rare_only(con, rare, both, speaker_weight, depth, where),
                                    key=lambda rs: (rs[1], rs[0]))[:depth]]
    if len(got) >= depth:
        return got
    if where is not None:
        return [r for r, _ in _match(con, plain, speaker_weight, depth, where)]
    seen = set(got)
    recent = _match(con, plain, speaker_weight, depth + len(got), None, since=highest_message_id(con) - TERM_CAP)
    return (got + [r for r, _ in recent if r not in seen])[:depth]


def _rare_only(con: Any, rare: str, both: list[tuple[int, float]], speaker_weight: float, depth: int,
               where: tuple[str, Sequence[Any]] | None) -> list[tuple[int, float]]:
    """The rows holding a rarer word that can join ``both`` (the best ``depth`` rows holding a
    rarer and a common word) among the best ``depth``, with their plain-OR scores. Ranked by the
    rarer words alone, not as ``rare NOT common``: naming a common word makes ``bm25()`` walk its
    whole posting list for its idf (~4 ms a word at a million messages), and a word a row does not
    hold adds nothing to its score. A row of that ranking outside ``both`` either holds no common
    word (its score here is its plain one) or holds one and was not among the best ``depth`` of
    ``both``, which is then full: its score here (worse than its plain score, which is no better
    than the last of ``both``) ranks it after all of them. Each row ahead of one that makes the
    final list is in it too, so ``depth`` rows beyond those of ``both`` are enough."""
    seen = {r for r, _ in both}
    return [(r, s) for r, s in _match(con, rare, speaker_weight, depth + len(both), where) if r not in seen]


def _match(con: Any, query: str, speaker_weight: float, depth: int, where: tuple[str, Sequence[Any]] | None,
           since: int | None = None) -> list[tuple[int, float]]:
    """(rowid, bm25 score: lower is better) of the best ``depth`` rows matching ``query``; with
    ``where``, each hit joined to its message row (CROSS JOIN: FTS5 first, the MATCH runs once)
    and the condition checked there; with ``since``, only rows whose id is above it."""
    if where is None:
        window, extra = ("AND rowid > ? ", [since]) if since is not None else ("", [])
        return [(r, s) for r, s in con.execute(
            f"SELECT rowid, {_SCORE} AS s FROM message_fts WHERE message_fts MATCH ? {window}ORDER BY s LIMIT ?",
            (speaker_weight, query, *extra, depth))]
    cond, args = where
    return [(r, s) for r, s in con.execute(
        f"SELECT f.rowid, {_SCORE} AS s FROM message_fts f CROSS JOIN messages m ON m.id=f.rowid "
        f"WHERE message_fts MATCH ? AND {cond} ORDER BY s LIMIT ?", (speaker_weight, query, *args, depth))]
