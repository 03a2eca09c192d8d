"""What ``add`` costs once the memory is large: five ``add_many`` of 1,000 synthetic messages
(scale.py's kind) added to a file ``scale.py --keep`` built, CPU and wall seconds per call.

    cp DIR/scale-1000000.db /tmp/copy.db
    python benchmarks/ingest_at_scale.py /tmp/copy.db DIR/scale-1000000.db.queries.npz

Run it on a copy: it adds to the file.
"""
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import DIM, FILLER, TableEmbedder, _unit  # noqa: E402

from memsif_lite import Config, Memory  # noqa: E402

path = sys.argv[1]
rng = np.random.default_rng(7)
centres = _unit(rng.standard_normal((200, DIM)))
msgs, V, index = [], [], {}
t0 = 1_700_000_000 + 60 * 1_000_000
for i in range(5000):
    k = (i // 8) % 200
    text = f"t{k}w{i % 5} extra {FILLER[i % len(FILLER)]} #{1_000_000 + i}"
    sp = "Ana" if i % 2 else "Ben"
    msgs.append({"speaker": sp, "text": text, "at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + 60 * i))})
    index[f"{sp}: {text}"] = i
    V.append(_unit(0.8 * centres[k] + 0.6 * _unit(rng.standard_normal(DIM))))
saved = np.load(sys.argv[2])
TableEmbedder.model_id, TableEmbedder.sem_levels = str(saved["model_id"]), tuple(saved["sem"].tolist())
emb = TableEmbedder(np.stack(V), index)
out = []
with Memory(path, embedder=emb, config=Config(sem_low=0.0, sem_high=0.64)) as mem:
    for s in range(0, 5000, 1000):
        c, w = time.process_time(), time.perf_counter()
        mem.add_many(msgs[s:s + 1000])
        out.append((round((time.process_time() - c), 3), round(time.perf_counter() - w, 3)))
print(json.dumps({"per_1000_cpu_wall_s": out,
                  "ms_per_message_cpu_p50": round(float(np.median([o[0] for o in out])), 3)}))
