"""The first query after opening: the message vectors' load (pages mapped in by two threads) and
the question embedded beside it (:func:`memsif_lite.pipelines.loading_beside`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from fakes import FakeEmbedder
from hypothesis import given, settings
from hypothesis import strategies as st

from memsif_lite import Memory
from memsif_lite.db import vector_cache
from memsif_lite.db.partition import ListMap
from memsif_lite.errors import EmbeddingError
from memsif_lite.partition import BLOCK_IDS, NONE


@settings(max_examples=80, deadline=None)
@given(held=st.sets(st.integers(0, 6), max_size=7), ids=st.lists(st.integers(-5, 8 * BLOCK_IDS), max_size=60),
       seed=st.integers(0, 2**32 - 1))
def test_a_list_map_gives_each_id_its_blocks_list(held, ids, seed):
    """Every block from 0 held (one gather by id) or some missing: the same lists, NONE for an id
    outside the held blocks (negative, beyond the last)."""
    rng = np.random.default_rng(seed)
    blocks = {b: rng.integers(0, 300, BLOCK_IDS).astype(np.uint16) for b in held}
    got = ListMap(blocks).lookup(np.array(ids, dtype=np.int64))
    want = [int(blocks[i // BLOCK_IDS][i % BLOCK_IDS]) if i >= 0 and i // BLOCK_IDS in blocks else NONE for i in ids]
    assert got.dtype == np.uint16 and got.tolist() == want


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("shape,dtype", [((3000, 384), np.int8), ((70001,), np.int64), ((5,), "S26")])
def test_a_mapped_array_is_empty_writable_memory_of_its_shape(monkeypatch, cores, shape, dtype):
    """Above the thresholds (lowered here) an array's pages are touched by two threads, or mapped
    in by this thread alone on one core: either way zeros of the asked shape and type, writable."""
    monkeypatch.setattr(vector_cache, "_MAPPED_FROM", 1)
    monkeypatch.setattr(vector_cache, "_TOUCHED_FROM", 4096)
    monkeypatch.setattr(vector_cache, "_cores", lambda: cores)
    a = vector_cache._mapped(shape, dtype)
    assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.writeable
    assert not a.view(np.uint8).any()
    a.reshape(-1)[-1] = 7 if a.dtype.kind != "S" else b"x"
    assert a.view(np.uint8).any()


class _Threads(FakeEmbedder):
    """Notes the thread of each call; ``fail``: raise instead of embedding."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.threads: list[threading.Thread] = []
        self.fail = fail

    def embed(self, texts, *, kind):
        self.threads.append(threading.current_thread())
        if self.fail and kind == "query":
            raise EmbeddingError("the model cannot be loaded")
        return super().embed(texts, kind=kind)


def _filled(path, n: int = 300) -> None:
    with Memory(path, embedder=FakeEmbedder()) as mem:
        mem.add_many([{"speaker": "Ana" if i % 2 else "Ben", "text": f"topic{i % 7} word{i}"} for i in range(n)])


def test_the_first_query_embeds_beside_the_load_and_answers_as_one_after_the_other(tmp_path):
    path = tmp_path / "m.db"
    _filled(path)
    with Memory(path, embedder=FakeEmbedder()) as mem:  # the reference: loaded first, then searched
        mem._db.messages.load_cache()
        want = [h.id for h in mem.search("topic3 word10", k=8)]
        want_ctx = mem.context("topic3 word10").text
    emb = _Threads()
    with Memory(path, embedder=emb) as mem:
        assert not mem._db.messages.cache_loaded
        got = [h.id for h in mem.search("topic3 word10", k=8)]
        assert mem._db.messages.cache_loaded
        assert emb.threads and emb.threads[0] is not threading.current_thread()  # beside the load
        assert not emb.threads[0].is_alive()  # ended before the search returned
        n = len(emb.threads)
        assert mem.context("topic3 word10").text == want_ctx
        mem.search("topic5 word12", k=8)
        assert all(t is threading.current_thread() for t in emb.threads[n:])  # later: in the caller's
    assert got == want


def test_an_embedding_error_on_the_first_query_is_raised_to_the_caller(tmp_path):
    path = tmp_path / "m.db"
    _filled(path, 50)
    emb = _Threads(fail=True)
    with Memory(path, embedder=emb) as mem:
        with pytest.raises(EmbeddingError, match="cannot be loaded"):
            mem.search("topic3", k=5)
        emb.fail = False
        assert mem.search("topic3", k=5)  # nothing left broken: the cache loaded, the next query answers
        assert mem.stats()["messages"] == 50


def test_an_interrupt_during_the_first_query_is_raised_at_once_and_the_next_query_waits(tmp_path):
    """Ctrl-C while the question is still being embedded beside the load: the KeyboardInterrupt
    reaches the caller at once (the helper still embedding), and the next query waits for the
    helper to leave the embedder before entering it (a real SIGINT, in a child process)."""
    path = tmp_path / "m.db"
    _filled(path, 50)
    script = textwrap.dedent(f"""
        import os, signal, sys, threading, time
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from fakes import FakeEmbedder
        from memsif_lite import Memory

        class Slow(FakeEmbedder):
            inside = overlap = 0
            slow = True

            def embed(self, texts, *, kind):
                Slow.inside += 1
                Slow.overlap += Slow.inside > 1
                try:
                    if kind == "query" and Slow.slow:
                        Slow.slow = False
                        time.sleep(3)
                    return super().embed(texts, kind=kind)
                finally:
                    Slow.inside -= 1

        # Python's own Ctrl-C handler: a test run started in the background of a non-interactive
        # shell ignores SIGINT, and a child inherits that (Python then installs none)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with Memory({str(path)!r}, embedder=Slow()) as mem:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            try:
                mem.search("topic3", k=5)
                print("not interrupted")
            except KeyboardInterrupt:
                print("interrupted; still embedding:", Slow.inside)
            mem.search("topic4", k=5)
            print("calls at once:", Slow.overlap)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["interrupted; still embedding: 1", "calls at once: 0"], out.stdout


def test_without_a_thread_to_be_had_the_first_query_runs_one_step_after_the_other(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    _filled(path, 50)

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(vector_cache, "_MAPPED_FROM", 1)
    monkeypatch.setattr(vector_cache, "_TOUCHED_FROM", 4096)
    monkeypatch.setattr(vector_cache, "_cores", lambda: 2)
    monkeypatch.setattr(threading.Thread, "start", refuse)
    emb = _Threads()
    with Memory(path, embedder=emb) as mem:
        assert [h.id for h in mem.search("topic3 word10", k=5)]
        assert emb.threads and all(t is threading.current_thread() for t in emb.threads)
        a = vector_cache._mapped((20000, 8), np.int8)  # its pages touched here alone
        assert not a.any()
