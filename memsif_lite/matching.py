"""The shared matching function φ(A,B) = α·s_sem + (1−α)·J(K_A, K_B)  (paper Eq. 1).

A unit's embedding is the mean of its members' unit vectors (kept as a running sum and a
count). The semantic part compares two units by the dot product of their means, which is the
*mean pairwise cosine* between their members: for two messages it is their cosine; for a
message and a segment it is the message's average cosine to the segment's messages. Unlike the
cosine of re-normalised means, it does not drift upwards as a unit grows, so one calibration
holds for units of any size (measured in benchmarks/calibrate.py: with re-normalised means the
boundary rule either cascades into one-message segments or merges whole conversations).

The raw value is rescaled per embedding model between two calibrated levels — the cosine of an
unrelated pair (→ 0) and of a same-topic pair (→ 1) — and clipped to [0, 1], so the paper's
thresholds keep their meaning for a model whose cosines bunch in a narrow range (0.7–0.9 for
the bundled one). ``J`` is the Jaccard overlap of key-entity sets. Vector search (vec0) uses
the re-normalised mean, which ranks the same way for a fixed query.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Iterable

import numpy as np

__all__ = ["normalised_cosine", "phi", "phi_given", "unit", "coherence", "overlap", "overlap_of"]


def unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return (v / n).astype(np.float32) if n > 0 else v.astype(np.float32)


def normalised_cosine(cos: float, levels: tuple[float, float]) -> float:
    low, high = levels
    return float(min(1.0, max(0.0, (cos - low) / (high - low))))


def phi(a: np.ndarray, ents_a: Iterable[str], b: np.ndarray, ents_b: Iterable[str], *, alpha: float,
        levels: tuple[float, float]) -> float:
    """φ for two units given their mean embeddings (means of unit vectors, not re-normalised)
    and entity sets."""
    return phi_given(a, b, overlap(_distinct(ents_a), _distinct(ents_b)), alpha=alpha, levels=levels)


def phi_given(a: np.ndarray, b: np.ndarray, entity_overlap: float, *, alpha: float,
              levels: tuple[float, float]) -> float:
    """:func:`phi` with the entity part already computed (:func:`overlap`, :func:`overlap_of`)."""
    cos = float(np.dot(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)))
    return alpha * normalised_cosine(cos, levels) + (1.0 - alpha) * entity_overlap


def _distinct(ents: Iterable[str]) -> AbstractSet[str]:
    """``ents`` as a set: as given when it is one already (a unit's ``entities.keys()``: a
    trajectory holds hundreds, copied for every candidate scored before), else a new one."""
    return ents if isinstance(ents, AbstractSet) else set(ents)


def overlap(a: AbstractSet[str], b: AbstractSet[str]) -> float:
    """:func:`~memsif_lite.entities.jaccard` of two sets, |A ∩ B| / (|A| + |B| − |A ∩ B|): the same
    counts and the same division, the intersection counted over the smaller set (no union built)."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    return overlap_of(sum(1 for e in small if e in large), len(a), len(b))


def overlap_of(common: int, n_a: int, n_b: int) -> float:
    """:func:`overlap` from the counts: ``common`` shared of ``n_a`` and ``n_b`` distinct entities."""
    if not n_a and not n_b:
        return 0.0
    return common / (n_a + n_b - common)


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
