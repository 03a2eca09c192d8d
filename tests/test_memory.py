"""Messages: validation (nothing written on bad input), the embedding cache, hybrid search."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from memsif_lite import Config, ConfigError, InvalidInputError, Memory, NotFoundError


class CountingEmbedder:
    def __init__(self, inner):
        self.inner = inner
        self.model_id, self.dim, self.metric = inner.model_id, inner.dim, inner.metric
        self.sem_levels = inner.sem_levels
        self.query_levels = getattr(inner, "query_levels", inner.sem_levels)
        self.texts: list[str] = []

    def embed(self, texts, *, kind):
        if kind == "passage":
            self.texts.extend(texts)
        return self.inner.embed(texts, kind=kind)


@pytest.mark.parametrize("bad", [
    {"speaker": "A", "text": ""},
    {"speaker": "A", "text": "   \n\t"},
    {"speaker": "A", "text": 42},
    {"speaker": "A", "text": None},
    {"speaker": "", "text": "hi"},
    {"speaker": "A", "text": "hi", "at": "yesterday-ish"},
    {"speaker": "A", "text": "hi", "at": 1700000000},
    {"speaker": "A", "text": "hi", "session": ["x"]},
    {"speaker": "A", "text": "bad \ud800 surrogate"},
    {"speaker": "A", "text": "hi", "colour": "blue"},
])
def test_bad_input_writes_nothing(memory, bad):
    mem = memory()
    mem.add("Z", "already stored")
    with pytest.raises(InvalidInputError):
        mem.add_many([{"speaker": "A", "text": "fine"}, bad, {"speaker": "B", "text": "also fine"}])
    assert [m.text for m in mem.messages()] == ["already stored"]
    assert mem.stats()["messages"] == 1 and mem.stats()["segments"] == 1


def test_add_accepts_datetimes_and_defaults_to_now(memory):
    mem = memory()
    before = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
    i = mem.add("A", "now")
    j = mem.add("A", "then", at=datetime(2020, 1, 2, 3, 4, 5))
    k = mem.add("A", "locomo style", at="1:56 pm on 8 May, 2023")
    assert mem.get(i).at >= before
    assert mem.get(j).at == datetime(2020, 1, 2, 3, 4, 5)
    assert mem.get(k).at == datetime(2023, 5, 8, 13, 56)
    with pytest.raises(NotFoundError):
        mem.get(999)


def test_cache_skips_reembedding(db, embedder):
    counting = CountingEmbedder(embedder)
    with Memory(db, embedder=counting) as mem:
        mem.add_many([{"speaker": "Ana", "text": "I love hiking."}, {"speaker": "Ana", "text": "I love hiking."},
                      {"speaker": "Ben", "text": "Me too."}])
        mem.add("Ana", "I love hiking.")
        assert counting.texts == ["Ana: I love hiking.", "Ben: Me too."]
        assert mem.stats()["messages"] == 4
    with Memory(db, embedder=counting) as mem:  # the cache is the file itself
        mem.add("Ben", "Me too.")
    assert counting.texts == ["Ana: I love hiking.", "Ben: Me too."]


def test_search_finds_paraphrase_above_unrelated(memory, embedder):
    mem = memory(embedder=embedder)
    mem.add_many([
        {"speaker": "Ana", "text": "The quarterly tax forms are due next Friday."},
        {"speaker": "Ana", "text": "My grandmother taught me how to bake sourdough bread."},
        {"speaker": "Ben", "text": "The train to Porto was delayed by two hours."},
    ])
    hits = mem.search("Who showed Ana how to make loaves of bread?", k=3)
    assert hits[0].text.startswith("My grandmother")
    assert hits[0].score > hits[-1].score
    dense_only = mem.search("learning to make pastry from an older relative", k=3)
    assert dense_only[0].text.startswith("My grandmother")


def test_search_validates_arguments(memory):
    mem = memory()
    mem.add("A", "hello")
    for bad in ("", "   "):
        with pytest.raises(InvalidInputError):
            mem.search(bad)
    with pytest.raises(InvalidInputError):
        mem.search("x", k=0)
    with pytest.raises(InvalidInputError):
        mem.search("x", level="paragraph")
    # FTS syntax in a query is data, not syntax
    assert mem.search('hello" OR NEAR(a b) AND * -- ;DROP TABLE messages', k=1)[0].text == "hello"


@pytest.mark.parametrize("kwargs", [
    {"tau_split": 0.7, "tau_merge": 0.6}, {"tau_merge": 1.5}, {"alpha_segment": -0.1}, {"theta_s": float("nan")},
    {"top_k": 0}, {"synchronous": "SOMETIMES"}, {"sem_low": 0.9}, {"sem_low": 0.9, "sem_high": 0.8},
])
def test_invalid_config_is_refused_up_front(kwargs):
    with pytest.raises(ConfigError):
        Config(**kwargs)


def test_config_from_files(tmp_path):
    (tmp_path / "c.json").write_text('{"tau_merge": 0.7, "fact_schema": [{"name": "Task", "description": "todo"}]}')
    (tmp_path / "c.toml").write_text('tau_split = 0.2\n')
    assert Config.from_file(tmp_path / "c.json").fact_schema[0].name == "Task"
    assert Config.from_file(tmp_path / "c.toml").tau_split == 0.2
    (tmp_path / "bad.json").write_text('{"tau_merge": 2}')
    with pytest.raises(ConfigError):
        Config.from_file(tmp_path / "bad.json")
    (tmp_path / "unknown.json").write_text('{"nonsense": 1}')
    with pytest.raises(ConfigError, match="unknown"):
        Config.from_file(tmp_path / "unknown.json")
