from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings


from fakes import FakeEmbedder, FakeLLMServer

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

FIXTURES = Path(__file__).parent / "fixtures"

# The suite is reproducible: every run (CI's included) draws the same examples. To hunt for new
# counterexamples, run with `--hypothesis-profile=explore` (random draws, five times as many).
settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=500)
settings.load_profile("default")


@pytest.fixture(scope="session")
def embedder():
    """The real bundled ONNX model, loaded once."""
    from memsif_lite.embed import OnnxEmbedder

    return OnnxEmbedder()


@pytest.fixture
def fake_embedder():
    return FakeEmbedder()


@pytest.fixture(scope="session")
def sample_messages():
    from importlib import resources

    from memsif_lite.importers import read_jsonl

    with resources.as_file(resources.files("memsif_lite.data").joinpath("sample_conversation.jsonl")) as p:
        return read_jsonl(p)


@pytest.fixture
def llm_server():
    with FakeLLMServer() as s:
        yield s


@pytest.fixture
def db(tmp_path):
    return tmp_path / "memory.db"


@pytest.fixture
def memory(db):
    """A factory: ``memory(**kwargs)`` opens ``Memory(db, embedder=FakeEmbedder(), **kwargs)``
    on this test's ``db`` file (``embedder=`` and ``path=`` override the defaults); every
    memory it opened is closed at teardown, so a test can call it again to reopen the file.
    Read what was stored with ``fakes.raw(db)``."""
    from memsif_lite import Memory

    opened: list[Memory] = []

    def open_memory(*, path=None, embedder=None, **kwargs) -> Memory:
        mem = Memory(db if path is None else path,
                     embedder=FakeEmbedder() if embedder is None else embedder, **kwargs)
        opened.append(mem)
        return mem

    yield open_memory
    for mem in reversed(opened):
        mem.close()


def file_bytes(path: Path) -> bytes:
    return Path(path).read_bytes()
