"""Vectors as int8 with a per-vector scale: the one quantiser of the file and the vector cache.

Each vector is scaled so that its largest component becomes ±127 and rounded to the nearest
integer (``numpy.rint``). The scale itself is not stored: every stored vector is unit length
(cosine metric), so ``q / ‖q‖`` recovers it within the quantisation tolerance, and cosine
distances — what sqlite-vec's ``distance_cosine_int8`` and :mod:`memsif_lite.db.vector_cache`
compute — do not depend on the scale at all.
"""

from __future__ import annotations

import numpy as np

__all__ = ["quantize", "dequantize", "cosine_distances"]


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
