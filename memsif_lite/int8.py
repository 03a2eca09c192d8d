"""Vectors as int8 with a per-vector scale: the one quantiser of the file and the vector cache.

Each vector is scaled so that its largest component becomes ±127 and rounded to the nearest
integer (``numpy.rint``). The scale itself is not stored: every stored vector is unit length
(cosine metric), so ``q / ‖q‖`` recovers it within the quantisation tolerance, and cosine
distances — what sqlite-vec's ``distance_cosine_int8`` and :mod:`memsif_lite.db.vector_cache`
compute — do not depend on the scale at all.
"""

from __future__ import annotations

import numpy as np

__all__ = ["quantize", "dequantize", "cosine_distances", "squared_norms", "inverse_norms", "NEAR_MARGIN"]

#: rows converted to float32 at a time by :func:`squared_norms` (fits the CPU cache)
_BLOCK = 1024
#: how far above the ``k``-th smallest a distance taken with :func:`inverse_norms` (float32) may
#: lie and still belong to the exact ``k`` nearest: such a distance is within 1e-6 of the true one
#: (four float32 roundings, each relative, of a cosine at most 1 in size, and that of ``1 - cos``),
#: the exact one is rounded to float32 (6e-8 near 1), so a row further than this from the ``k``-th
#: cannot be among the exact ``k``
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
