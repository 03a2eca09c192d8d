from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakes import FakeEmbedder, FakeLLMServer

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

FIXTURES = Path(__file__).parent / "fixtures"


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


def file_bytes(path: Path) -> bytes:
    return Path(path).read_bytes()
