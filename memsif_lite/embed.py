"""Embeddings: the bundled ONNX model (onnxruntime + tokenizers, no torch, no network),
behind a small protocol so another model can be configured.

A model directory holds ``embedder.json`` (model id, dimension, prefixes and the calibrated
cosine levels used to normalise the semantic score), the ONNX file and ``tokenizer.json``.
Without a manifest the directory must hold ``model*.onnx`` and ``tokenizer.json``; the id is
then derived from the ONNX file's hash.

A file records the id of the model that wrote it; :func:`resolve_embedder` turns such an id back
into an embedder (the bundled models by id, ``litellm:MODEL`` through the registry, a model
directory by path), the way simonw/llm resolves a collection's model, so any file can be opened
without naming its model again. :class:`Embeddings` adds the caches the pipelines share.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from .errors import EmbeddingError

__all__ = ["Embedder", "OnnxEmbedder", "LiteLLMEmbedder", "Embeddings", "default_model_dir", "load_embedder",
           "resolve_embedder", "register_embedder", "bundled_models", "validate_vectors"]

log = logging.getLogger("memsif_lite")
Kind = Literal["query", "passage"]


@runtime_checkable
class Embedder(Protocol):
    """What memsif needs of an embedding model. Vectors are float32, L2-normalised, [n, dim]."""

    model_id: str
    dim: int
    metric: str
    #: raw-cosine levels of an unrelated pair and a same-topic pair (normalisation of s_sem)
    sem_levels: tuple[float, float]
    #: optional ``query_levels``: the same for two questions (different need / same need),
    #: used for Coh(Q_k) of candidate clusters; defaults to ``sem_levels``

    def embed(self, texts: Sequence[str], *, kind: Kind) -> np.ndarray: ...


def default_model_dir() -> Path:
    """The bundled model: package data after ``pip install .``, else the checkout's models/."""
    try:
        from importlib import resources

        manifest = Path(str(resources.files("memsif_lite.models").joinpath("embedder.json")))
        if manifest.is_file():
            return manifest.parent
    except (ModuleNotFoundError, TypeError):
        pass
    p = Path(__file__).resolve().parent.parent / "models"
    if (p / "embedder.json").is_file():
        return p
    raise EmbeddingError("the bundled embedding model is missing; reinstall memsif_lite")


def validate_vectors(vecs: np.ndarray, n: int, dim: int) -> np.ndarray:
    """Float32, finite, the right shape, unit length: anything else is an EmbeddingError."""
    try:
        arr = np.asarray(vecs, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise EmbeddingError(f"embedder returned non-numeric vectors: {e}") from e
    if arr.shape != (n, dim):
        raise EmbeddingError(f"embedder returned shape {arr.shape}, expected {(n, dim)}")
    if not np.isfinite(arr).all():
        raise EmbeddingError("embedder returned NaN or infinite values")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    if n and (norms < 1e-6).any():
        raise EmbeddingError("embedder returned a zero vector")
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


class OnnxEmbedder:
    """An E5-style encoder run with onnxruntime: mean pooling over the mask, L2-normalised."""

    metric = "cosine"

    def __init__(self, model_dir: str | Path | None = None, *, threads: int | None = None, batch_size: int = 32):
        d = Path(model_dir) if model_dir is not None else default_model_dir()
        manifest_path = d / "embedder.json"
        try:
            if manifest_path.is_file():
                m = json.loads(manifest_path.read_text(encoding="utf-8"))
                onnx_path = d / m.get("onnx", "model_int8.onnx")
                tok_path = d / m.get("tokenizer", "tokenizer.json")
            else:
                m = {}
                candidates = sorted(d.glob("model*.onnx"))
                if not candidates:
                    raise EmbeddingError(f"no model*.onnx in {d}")
                onnx_path, tok_path = candidates[0], d / "tokenizer.json"
                m["model_id"] = f"{d.name}-{_file_digest(onnx_path)[:12]}"
        except (OSError, ValueError) as e:
            raise EmbeddingError(f"cannot read embedding model in {d}: {e}") from e
        self.model_id: str = str(m["model_id"])
        self.max_length = int(m.get("max_length", 512))
        self.pad_id = int(m.get("pad_id", 1))
        self.prefixes = {"query": m.get("query_prefix", "query: "), "passage": m.get("passage_prefix", "passage: ")}
        self.sem_levels = (float(m.get("sem_low", 0.0)), float(m.get("sem_high", 1.0)))
        self.query_levels = (float(m.get("query_low", self.sem_levels[0])),
                             float(m.get("query_high", self.sem_levels[1])))
        self.batch_size = batch_size
        self._threads = threads or os.cpu_count() or 1
        self._onnx_path, self._tok_path = onnx_path, tok_path
        self._session: Any = None
        self._tokenizer: Any = None
        self.dim: int = int(m["dim"]) if "dim" in m else self._probe_dim()

    def _load(self) -> None:
        if self._session is not None:
            return
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as e:  # pragma: no cover - both are install requirements
            raise EmbeddingError(f"onnxruntime/tokenizers not installed: {e}") from e
        try:
            tok = Tokenizer.from_file(str(self._tok_path))
            tok.no_padding()
            tok.enable_truncation(self.max_length)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = self._threads
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            sess = ort.InferenceSession(str(self._onnx_path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
            raise EmbeddingError(f"cannot load embedding model {self._onnx_path}: {e}") from e
        self._inputs = {i.name for i in sess.get_inputs()}
        self._tokenizer, self._session = tok, sess

    def _probe_dim(self) -> int:
        self._load()
        out = self._run([[0, 2]])
        return int(out.shape[1])

    def _run(self, ids: list[list[int]]) -> np.ndarray:
        width = max(len(x) for x in ids)
        input_ids = np.full((len(ids), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        hidden = self._session.run(None, feeds)[0]
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
        return pooled.astype(np.float32)

    def embed(self, texts: Sequence[str], *, kind: Kind) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._load()
        prefix = self.prefixes[kind]
        try:
            encs = self._tokenizer.encode_batch([prefix + t for t in texts])
            ids = [e.ids for e in encs]
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
            out = np.zeros((len(ids), self.dim), dtype=np.float32)
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                out[chunk] = self._run([ids[i] for i in chunk])
        except EmbeddingError:
            raise
        except Exception as e:  # noqa: BLE001
            raise EmbeddingError(f"embedding failed: {e}") from e
        return validate_vectors(out, len(texts), self.dim)


class LiteLLMEmbedder:
    """An embedding API through litellm (e.g. ``openai/text-embedding-3-small`` or a local server).

    ``sem_levels`` should be calibrated for the model (benchmarks/calibrate.py); the defaults
    treat cosine 0 as unrelated and 1 as identical.
    """

    metric = "cosine"

    def __init__(self, model: str, *, sem_levels: tuple[float, float] = (0.0, 1.0), timeout: float = 30.0,
                 **litellm_kwargs: object):
        self.model_id = f"litellm:{model}"
        self._model = model
        self._kwargs = litellm_kwargs
        self._timeout = timeout
        self.sem_levels = sem_levels
        self.dim = int(self._call(["dimension probe"]).shape[1])

    def _call(self, texts: Sequence[str]) -> np.ndarray:
        from .llm import import_litellm

        litellm = import_litellm()
        try:
            resp = litellm.embedding(model=self._model, input=list(texts), timeout=self._timeout, **self._kwargs)
            data = sorted(resp.data, key=lambda d: d["index"])
            return np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except Exception as e:  # noqa: BLE001
            raise EmbeddingError(f"embedding API {self._model} failed: {e}") from e

    def embed(self, texts: Sequence[str], *, kind: Kind) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return validate_vectors(self._call(texts), len(texts), self.dim)


EmbedderFactory = Callable[[str, "tuple[float, float] | None"], Embedder]
_FACTORIES: dict[str, EmbedderFactory] = {}


def register_embedder(prefix: str, factory: EmbedderFactory) -> None:
    """Make ``PREFIX:NAME`` model ids resolvable: ``factory(NAME, sem_levels)`` builds the
    embedder (``sem_levels`` is what the file recorded, or None for a new file)."""
    if not prefix or ":" in prefix:
        raise ValueError("an embedder prefix is a non-empty name without ':'")
    _FACTORIES[prefix] = factory


register_embedder("litellm", lambda name, levels: LiteLLMEmbedder(name, sem_levels=levels or (0.0, 1.0)))


def bundled_models() -> dict[str, Path]:
    """Model id -> directory of every model shipped in the package."""
    root = default_model_dir()
    out: dict[str, Path] = {}
    for d in [root, *sorted(p for p in root.iterdir() if p.is_dir())]:
        manifest = d / "embedder.json"
        if manifest.is_file():
            try:
                out[str(json.loads(manifest.read_text(encoding="utf-8"))["model_id"])] = d
            except (OSError, ValueError, KeyError):
                log.warning("ignoring an unreadable model manifest %s", manifest)
    return out


def resolve_embedder(spec: str | None, *, sem_levels: tuple[float, float] | None = None) -> Embedder:
    """An embedder for a model id or spec: ``None`` (the bundled default), a bundled model's id,
    ``PREFIX:NAME`` for a registered prefix (``litellm:openai/text-embedding-3-small``), or a
    directory holding an ONNX model."""
    if spec is None:
        return OnnxEmbedder()
    bundled = bundled_models()
    if spec in bundled:
        return OnnxEmbedder(bundled[spec])
    prefix, sep, name = spec.partition(":")
    if sep and prefix in _FACTORIES:
        return _FACTORIES[prefix](name, sem_levels)
    if Path(spec).is_dir():
        return OnnxEmbedder(spec)
    raise EmbeddingError(f"unknown embedding model {spec!r}: not bundled ({', '.join(sorted(bundled))}), "
                         f"no registered prefix ({', '.join(sorted(_FACTORIES))}) and not a model directory; "
                         "pass embedder=... to open this file")


def load_embedder(spec: str | None) -> Embedder:
    """Kept for callers of the first release: :func:`resolve_embedder`."""
    return resolve_embedder(spec)


class Embeddings:
    """The embedding service the pipelines share: passage vectors through the content-hash cache
    (the file: a passage already stored is never embedded again), query vectors through a small
    in-process LRU, every vector validated."""

    def __init__(self, embedder: Embedder, stored_vector: Callable[[bytes], np.ndarray | None], *,
                 query_cache: int = 512):
        self.embedder = embedder
        self.dim = embedder.dim
        self._stored_vector = stored_vector
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache = query_cache

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return validate_vectors(self.embedder.embed(list(texts), kind="passage"), len(texts), self.dim)

    def passages_cached(self, passages: Sequence[str], hashes: Sequence[bytes]) -> np.ndarray:
        """Vectors for passages whose content hashes are given, embedding only unseen ones."""
        out = np.zeros((len(passages), self.dim), dtype=np.float32)
        todo: dict[bytes, list[int]] = {}
        for i, h in enumerate(hashes):
            vec = self._stored_vector(h)
            if vec is not None:
                out[i] = vec
            else:
                todo.setdefault(h, []).append(i)
        if todo:
            firsts = [idx[0] for idx in todo.values()]
            fresh = self.passages([passages[i] for i in firsts])
            for vec, idx in zip(fresh, todo.values(), strict=True):
                out[idx] = vec
        return out

    def query(self, text: str) -> np.ndarray:
        v = self._queries.get(text)
        if v is None:
            v = validate_vectors(self.embedder.embed([text], kind="query"), 1, self.dim)[0]
            self._queries[text] = v
            if len(self._queries) > self._query_cache:
                self._queries.popitem(last=False)
        else:
            self._queries.move_to_end(text)
        return v


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
