"""What linking a segment into an Event Trajectory costs as the trajectory's vocabulary grows: the
candidate's score (its entity overlap) and the link (load, save, the segment's counts added), as
``TrajectoryBuilder`` does them (schema 22: a row an entity; before it, the counts were one JSON
object read and written whole: 15 ms a link at 20,000 entities on the stop 39 machine).

    python benchmarks/trajectory_entities.py [--links 1000]

Entities are names, numbers and salient nouns, so a trajectory that runs for years keeps meeting new
ones; replicated LoCoMo text repeats one vocabulary and cannot show it. Each link here adds a segment
of 20 entities, 10 of them never seen before (and one recurring name). Printed: ms a link, averaged
over each 100 links, against the distinct entities met so far. Real file in a temporary folder.
"""
import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

from memsif_lite import Memory  # noqa: E402
from memsif_lite.db.rows import Unit  # noqa: E402

DIM = 384


class _Flat:
    """One vector for every text: only the trajectory's counts are being timed."""

    model_id, dim, metric, sem_levels = "flat-384", DIM, "cosine", (0.0, 1.0)

    def embed(self, texts, *, kind):
        return np.full((len(texts), DIM), 1 / np.sqrt(DIM), dtype=np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--links", type=int, default=1000)
    args = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {machine()}")
    with tempfile.TemporaryDirectory() as d, Memory(Path(d) / "m.db", embedder=_Flat()) as mem:
        st, db = mem._db.structure, mem._db  # benchmark-only: the data-access layer, as the pipeline calls it
        v = np.full(DIM, 1 / np.sqrt(DIM))
        with db.write():
            tid = st.create_trajectory(Unit(0, 1, v, Counter({"porto": 1}), "2024-01-01T00:00:00",
                                            "2024-01-01T00:00:00"))
        new = 0
        for start in range(0, args.links, 100):
            t0 = time.perf_counter()
            for _ in range(start, min(args.links, start + 100)):
                seg = Counter({"porto": 3, **{f"w{new + j}": 1 for j in range(10)}, **{f"c{j}": 1 for j in range(10)}})
                new += 10
                with db.write():  # as TrajectoryBuilder scores the candidate and links the segment to it
                    t = st.load("trajectory", tid, counts=False)
                    st.entity_overlaps([tid], seg.keys())
                    t.add(v, [], t.start_at, t.end_at)
                    st.save("trajectory", t, n_segments=1)
                    st.add_entities(tid, seg)
            n = min(args.links, start + 100) - start
            print(f"{new + 11:7d} entities met: {(time.perf_counter() - t0) * 1000 / n:6.2f} ms a link")


if __name__ == "__main__":
    main()
