"""Offline evidence excerpts: a long message is cut to its most relevant sentences, the
best-ranked one less tightly (its other sentences often hold the answer)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from fakes import FakeEmbedder
from memsif_lite import Memory, query
from memsif_lite.tokens import count_tokens

T0 = datetime(2024, 5, 1, 9, 0)
FILLER = " ".join(f"Then we walked past shop number {i} and talked about nothing much." for i in range(8))


def _long(first: str) -> str:
    return f"{first} {FILLER} The posters said: love is love, be yourself."


@pytest.fixture
def mem(tmp_path):
    m = Memory(tmp_path / "m.db", embedder=FakeEmbedder())
    m.add_many([{"speaker": "Ana", "text": _long("At the poetry reading the posters were everywhere."), "at": T0},
                {"speaker": "Ben", "text": _long("My poetry reading had posters too."),
                 "at": T0 + timedelta(days=3)}])
    yield m
    m.close()


def test_the_best_ranked_message_keeps_more_of_its_sentences(mem):
    ctx = mem.context("What did the posters at the poetry reading say?", budget_tokens=1000)
    top, second = ctx.evidence[0], ctx.evidence[1]
    assert count_tokens(top.stmt) > query.MAX_EVIDENCE_TOKENS + 1
    assert count_tokens(top.stmt.removesuffix(" …")) <= query.TOP_EVIDENCE_TOKENS
    assert count_tokens(second.stmt.removesuffix(" …")) <= query.MAX_EVIDENCE_TOKENS
    assert "poetry reading" in top.stmt and "love is love" in ctx.text


def test_the_top_allowance_is_a_knob(mem, monkeypatch):
    monkeypatch.setattr(query, "TOP_EVIDENCE_TOKENS", query.MAX_EVIDENCE_TOKENS)
    ctx = mem.context("What did the posters at the poetry reading say?", budget_tokens=1000)
    assert all(count_tokens(e.stmt.removesuffix(" …")) <= query.MAX_EVIDENCE_TOKENS for e in ctx.evidence)
