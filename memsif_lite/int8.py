"""Vectors as int8 with a per-vector scale: the one quantiser of the file and the vector cache.

Each vector is scaled so that its largest component becomes ±127 and rounded to the nearest
integer (``numpy.rint``). The scale itself is not stored: every stored vector is unit length
(cosine metric), so ``q / ‖q‖`` recovers it within the quantisation tolerance, and cosine
distances — what sqlite-vec's ``distance_cosine_int8`` and :mod:`memsif_lite.db.vector_cache`
compute — do not depend on the scale at all.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

__all__ = ["quantize", "dequantize", "cosine_distances", "squared_norms", "inverse_norms", "dot_products",
           "NEAR_MARGIN"]

#: rows converted to float32 at a time by :func:`squared_norms` (fits the CPU cache)
_BLOCK = 1024
#: how far above the ``k``-th smallest a distance taken with :func:`inverse_norms` (float32) may
#: lie and still belong to the exact ``k`` nearest: such a distance is within 1e-6 of the true one
#: (a few float32 roundings of numbers at most 1 in size), the exact one is rounded to float32
#: (6e-8 near 1), so a row further than this from the ``k``-th cannot be among the exact ``k``
NEAR_MARGIN = 1e-5


def quantize(v: np.ndarray) -> np.ndarray:
    """float vector(s) ``[..., dim]`` → int8 codes of the same shape (all-zero stays zero)."""
    x = np.asarray(v, dtype=np.float32)
    m = np.abs(x).max(axis=-1, keepdims=True)
    scale = np.divide(np.float32(127.0), m, out=np.zeros_like(m), where=m > 0)
    return np.rint(x * scale).astype(np.int8)  # |x| * scale <= 127 (float32 rounding stays below 127.5)


def dequantize(q: np.ndarray) -> np.ndarray:
    """int8 codes ``[..., dim]`` → unit float32 vectors (the stored direction)."""
    x = np.asarray(q, dtype=np.float32)
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, n, out=np.zeros_like(x), where=n > 0)


def cosine_distances(dots: np.ndarray, sq_rows: np.ndarray, sq_query: float) -> np.ndarray:
    """``1 - dot / (‖a‖‖b‖)`` exactly as sqlite-vec's ``distance_cosine_int8`` computes it: the
    integer sums are exact (|sum| < 2**24), square roots and division in double, the result
    rounded to float32 — so cache and vec0 produce the same distances, bit for bit."""
    den = np.sqrt(sq_rows) * np.sqrt(np.float64(sq_query))
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1.0 - dots.astype(np.float64) / den).astype(np.float32)


def squared_norms(codes: np.ndarray) -> np.ndarray:
    """Exact squared norms of int8 code rows (as float64, the cosine's denominator). In float32
    blocks while every partial sum is an integer float32 holds exactly (``128² · dim < 2²⁴``:
    dimension up to 1,023, whatever codes a file holds), about twice as fast as numpy's integer
    product; in int32 above that."""
    n, dim = codes.shape
    if 128 * 128 * dim >= 1 << 24:
        return np.einsum("ij,ij->i", codes, codes, dtype=np.int32, casting="unsafe").astype(np.float64)
    out = np.empty(n, dtype=np.float64)
    block = np.empty((min(n, _BLOCK), dim), dtype=np.float32)
    for s in range(0, n, _BLOCK):
        m = block[:min(_BLOCK, n - s)]
        np.copyto(m, codes[s:s + _BLOCK], casting="unsafe")
        out[s:s + len(m)] = np.einsum("ij,ij->i", m, m)
    return out


def inverse_norms(codes: np.ndarray) -> np.ndarray:
    """``1 / ‖code‖`` of int8 code rows as float32, ``inf`` for an all-zero row (its product with
    any dot product, always 0, is then NaN: such a row ranks last, as its exact distance does)."""
    with np.errstate(divide="ignore"):
        return (1.0 / np.sqrt(squared_norms(codes))).astype(np.float32)


def dot_products(codes: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Exact dot products (int32) of int8 code rows ``[n, dim]`` with the int8 code ``q``: one
    onnxruntime ``MatMulInteger`` (its int8 kernels read the codes as they lie, no float32 copy;
    ~20 % faster than converting blocks to float32 for a BLAS product, 2026-12-03), on the calling
    thread. ``|sum| <= 128² · dim`` fits int32 up to dimension 131,071."""
    if codes.shape[0] == 0:
        return np.empty(0, dtype=np.int32)
    out = _dots_session().run(None, {"A": np.ascontiguousarray(codes, dtype=np.int8),
                                     "B": np.ascontiguousarray(q, dtype=np.int8).reshape(-1, 1)})[0]
    return out.reshape(-1)


_session: tuple[int, Any] | None = None
_session_lock = threading.Lock()


def _dots_session() -> Any:
    """The ``MatMulInteger`` session of this process (made again in a forked child), one thread."""
    global _session
    held = _session
    if held is not None and held[0] == os.getpid():
        return held[1]
    with _session_lock:
        if _session is None or _session[0] != os.getpid():
            import onnxruntime as ort
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            sess = ort.InferenceSession(_matmul_integer_model(), opts, providers=["CPUExecutionProvider"])
            sess.disable_fallback()
            _session = (os.getpid(), sess)
        return _session[1]


def _matmul_integer_model() -> bytes:
    """The ONNX model ``Y[n, 1] = MatMulInteger(A[n, d], B[d, 1])`` (int8 in, int32 out; IR 8,
    opset 13), written out as its protobuf bytes: field numbers from onnx.proto3 (ModelProto:
    ir_version 1, graph 7, opset_import 8; GraphProto: node 1, name 2, input 11, output 12; NodeProto:
    input 1, output 2, op_type 4; ValueInfoProto: name 1, type 2; TypeProto: tensor_type 1;
    TypeProto.Tensor: elem_type 1, shape 2; TensorShapeProto: dim 1; Dimension: dim_value 1, dim_param 2)."""
    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def field(num: int, payload: bytes | str) -> bytes:
        data = payload.encode() if isinstance(payload, str) else payload
        return varint(num << 3 | 2) + varint(len(data)) + data

    def number(num: int, value: int) -> bytes:
        return varint(num << 3) + varint(value)

    def value(name: str, elem: int, dims: tuple[str | int, ...]) -> bytes:
        shape = b"".join(field(1, number(1, d) if isinstance(d, int) else field(2, d)) for d in dims)
        return field(1, name) + field(2, field(1, number(1, elem) + field(2, shape)))

    INT8, INT32 = 3, 6
    node = field(1, "A") + field(1, "B") + field(2, "Y") + field(4, "MatMulInteger")
    graph = (field(1, node) + field(2, "int8_dots") + field(11, value("A", INT8, ("n", "d")))
             + field(11, value("B", INT8, ("d", 1))) + field(12, value("Y", INT32, ("n", 1))))
    return number(1, 8) + field(7, graph) + field(8, field(1, "") + number(2, 13))
