"""Leaks and duplicates that once were (issue 25), checked so they do not come back: one module
reads the schema version, SQL is never cut apart, query words are not recovered from the FTS
string, one error module, one cache key, protocols used as protocols, and the reading methods of
``Memory`` taking their filters one way and reading from one snapshot."""

from __future__ import annotations

import ast
import re
import inspect
from pathlib import Path

import pytest

from fakes import FakeEmbedder, raw
from memsif_lite import Config, errors
from memsif_lite.db import MessageRow
from memsif_lite.db.messages import CONTENT_KEY
from memsif_lite.core_facts import FactExtractor, LLMFactExtractor, OfflineFactExtractor
from memsif_lite.embed import passage, passage_hash, query_levels
from memsif_lite.llm import LLM, Backoff, FormatNegotiation, ModelHealth
from memsif_lite.offline_evidence import query_words
from memsif_lite.query import QueryPipeline
from memsif_lite.retrieval import Retriever, fts_query, query_terms

PKG = Path(__file__).resolve().parent.parent / "memsif_lite"


def _sources() -> dict[str, str]:
    return {f.relative_to(PKG).as_posix(): f.read_text(encoding="utf-8") for f in PKG.rglob("*.py")}


def _trees() -> dict[str, ast.Module]:
    return {f.relative_to(PKG).as_posix(): ast.parse(f.read_text(encoding="utf-8")) for f in PKG.rglob("*.py")}


def test_only_store_reads_the_schema_version():
    for f in PKG.rglob("*.py"):
        if f.name != "store.py":
            assert "user_version" not in f.read_text(encoding="utf-8"), f"{f.name} reads user_version"


def test_no_module_cuts_sql_or_a_query_string_apart():
    for name, tree in _trees().items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("split", "rsplit", "partition") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                sep = node.args[0].value
                assert "WHERE" not in sep.upper() and sep.strip() != "OR", f"{name}:{node.lineno} splits on {sep!r}"


def test_query_words_are_the_fts_query_terms():
    for q in ["What did Sam's sister adopt in 2023?", "Où habite Léa ?", "东京的天气怎么样", "the of a",
              '"quoted" OR x']:
        terms = query_terms(q)
        assert query_words(q) == set(terms)
        assert fts_query(q) == (" OR ".join('"' + t.replace('"', '""') + '"' for t in terms) if terms else None)


def test_stale_error_is_defined_once_in_the_errors_module():
    places = [name for name, tree in _trees().items() for node in ast.walk(tree)
              if isinstance(node, ast.ClassDef) and node.name == "StaleError"]
    assert places == ["errors.py"]


def test_the_error_tree_names_every_user_error():
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        cls = getattr(errors, name)
        if issubclass(cls, errors.MemsifError):
            assert name in doc, f"the tree in errors.py does not show {name}"


def test_the_passage_cache_key_is_made_in_one_place(memory, db):
    """A message's content hash is ``passage_hash(passage(speaker, text))`` (a row keeps its first
    bytes), and only embed.py
    hashes passages (db/merge.py hashes tombstones, history.py the CoreFact decisions an undo remembers,
    view/page.py the page's own script and style, for its Content-Security-Policy,
    store.py the changes logged before schema 12 gave each one a uid)."""
    mem = memory()
    mid = mem.add("Sam", "I adopted a greyhound named Pixel.")
    with raw(db) as con:
        stored = con.execute("SELECT content_hash FROM messages WHERE id=?", (mid,)).fetchone()[0]
    # its first CONTENT_KEY bytes since schema 18
    assert stored == passage_hash(passage("Sam", "I adopted a greyhound named Pixel."))[:CONTENT_KEY]
    hashing = {name for name, tree in _trees().items() for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr == "sha256"}
    assert hashing <= {"embed.py", "db/merge.py", "history.py", "view/page.py", "store.py"}, hashing
    key = re.compile(r'f"\{[a-z_.]*speaker\}: \{[a-z_.]*text\}"')
    spelled = {name for name, text in _sources().items() if key.search(text)}
    # (retrieval.py: a segment's display lines in a search result, not a key)
    assert spelled <= {"embed.py", "retrieval.py"}, f"the passage key is spelled out in {spelled}: use embed.passage"


def test_rules_are_used_through_their_protocols():
    """No ``isinstance`` on a rule class (an injected rule would be treated as offline); mypy
    checks that each rule meets its protocol where pipelines.build annotates it."""
    rules = {node.name for tree in _trees().values() for node in ast.walk(tree)
             if isinstance(node, ast.ClassDef) and node.name.startswith(("LLM", "Offline"))}
    for name, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                assert not (isinstance(node.args[1], ast.Name) and node.args[1].id in rules), \
                    f"{name}:{node.lineno} isinstance on {node.args[1].id}"
    said = [MessageRow(1, "Sam", "I live in Porto.", "2024-01-01T00:00:00", None, None)]
    offline: FactExtractor = OfflineFactExtractor(Config().fact_schema)
    assert offline.prompt(said, []) is None
    llm: FactExtractor = LLMFactExtractor(LLM("openai/x"), Config().fact_schema, offline)
    assert llm.prompt(said, []) is not None


def test_query_levels_come_from_the_protocol_or_the_passage_levels():
    fake = FakeEmbedder(sem_levels=(0.1, 0.9))
    assert query_levels(fake, (0.1, 0.9)) == (0.1, 0.9)
    fake.query_levels = (0.3, 0.8)  # type: ignore[attr-defined]
    assert query_levels(fake, (0.1, 0.9)) == (0.3, 0.8)
    tree = _trees()["pipelines.py"]
    assert not any(isinstance(n, ast.Constant) and n.value == "query_levels" for n in ast.walk(tree))


def test_back_off_and_format_negotiation_are_apart():
    h = ModelHealth(down_after=1, backoff_s=30.0, schema_mode="auto")
    assert isinstance(h.backoff, Backoff) and isinstance(h.formats, FormatNegotiation)
    assert h.formats.weaker("json_schema") and h.formats.mode == "json_object_schema"
    assert h.available()
    h.backoff.outage()
    assert not h.available() and 0 < h.seconds_left() <= 30.0
    assert h.formats.mode == "json_object_schema"
    fixed = FormatNegotiation("json_object")
    assert not fixed.weaker("json_object") and fixed.mode == "json_object"


@pytest.mark.parametrize("method", ["search", "messages", "facts", "context", "ask"])
def test_reading_methods_take_their_filters_one_way(memory, method):
    from memsif_lite import Memory

    mem = memory()
    params = inspect.signature(getattr(Memory, method)).parameters
    assert "criteria" in params and not {"speakers", "sessions", "since", "until"} & set(params)
    src = inspect.getsource(getattr(Memory, method))
    assert "self._filter(criteria)" in src and "MessageFilter.build(**criteria)" in inspect.getsource(Memory._filter)
    args = ("What?",) if method in ("search", "context", "ask") else ()
    with pytest.raises(TypeError):
        getattr(mem, method)(*args, speaker="Sam")


def test_search_and_offline_context_read_from_one_snapshot(memory, monkeypatch):
    seen: list[tuple[str, bool]] = []
    search, context = Retriever.search, QueryPipeline.context

    def spy_search(self, *a, **k):
        seen.append(("search", self.db.in_transaction))
        return search(self, *a, **k)

    def spy_context(self, *a, **k):
        seen.append(("context", self.db.in_transaction))
        return context(self, *a, **k)

    monkeypatch.setattr(Retriever, "search", spy_search)
    monkeypatch.setattr(QueryPipeline, "context", spy_context)
    mem = memory()
    mem.add("Sam", "I adopted a greyhound named Pixel.")
    mem.search("greyhound")
    mem.context("What did Sam adopt?", speakers="Sam")
    assert seen == [("search", True), ("context", True)]
