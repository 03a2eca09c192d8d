"""The shared matching function φ(A,B) = α·s_sem + (1−α)·J(K_A, K_B)  (paper Eq. 1).

``s_sem`` is the cosine of the (L2-normalised mean) embeddings, rescaled per embedding model
between two calibrated levels — the cosine of an unrelated pair (→ 0) and of a same-topic pair
(→ 1) — and clipped to [0, 1], so the paper's thresholds keep their meaning for a model whose
raw cosines bunch in a narrow range. ``J`` is the Jaccard overlap of key-entity sets.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from .entities import jaccard

__all__ = ["normalised_cosine", "phi", "unit", "coherence"]


def unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return (v / n).astype(np.float32) if n > 0 else v.astype(np.float32)


def normalised_cosine(cos: float, levels: tuple[float, float]) -> float:
    low, high = levels
    return float(min(1.0, max(0.0, (cos - low) / (high - low))))


def phi(a: np.ndarray, ents_a: Iterable[str], b: np.ndarray, ents_b: Iterable[str], *, alpha: float,
        levels: tuple[float, float]) -> float:
    """φ for two units given their embeddings (any scale; normalised here) and entity sets."""
    cos = float(np.dot(unit(np.asarray(a, dtype=np.float64)), unit(np.asarray(b, dtype=np.float64))))
    return alpha * normalised_cosine(cos, levels) + (1.0 - alpha) * jaccard(set(ents_a), set(ents_b))


def coherence(vectors: np.ndarray, levels: tuple[float, float]) -> float:
    """Coh(·): mean pairwise normalised cosine of a set of unit vectors; 1 for a singleton."""
    n = len(vectors)
    if n <= 1:
        return 1.0
    v = np.asarray(vectors, dtype=np.float64)
    sims = v @ v.T
    iu = np.triu_indices(n, k=1)
    low, high = levels
    return float(np.clip((sims[iu] - low) / (high - low), 0.0, 1.0).mean())
