"""add() latency with a model that takes 8 s per call (the test suite's fake OpenAI-compatible
server over real HTTP, every reply delayed), in each processing mode, next to offline.

    python benchmarks/slow_llm.py [--delay 8] [--messages 40]

Background and manual modes must cost add() nothing measurable over offline; inline waits for
the steps (but never holds the write lock while it waits).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _common import machine, pct, timed_adds  # noqa: E402
from fakes import FakeLLMServer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delay", type=float, default=8.0)
    ap.add_argument("--messages", type=int, default=40)
    args = ap.parse_args()
    from importlib import resources

    from memsif_lite import Config, Memory
    from memsif_lite.importers import read_jsonl

    with resources.as_file(resources.files("memsif_lite.data").joinpath("sample_conversation.jsonl")) as p:
        items = read_jsonl(p)[: args.messages]
    t0 = datetime(2024, 1, 1)
    items = [{**m, "at": m.get("at") or t0 + timedelta(minutes=i)} for i, m in enumerate(items)]
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "delay_s": args.delay, "modes": {}}
    with FakeLLMServer(default=lambda req: {"sleep": args.delay, "content": "{}"}) as server, \
            tempfile.TemporaryDirectory() as d:
        for mode in ("offline", "background", "manual"):
            kw: dict = {"config": Config(llm_timeout_s=args.delay + 5, llm_retries=0)}
            if mode != "offline":
                kw.update(llm="openai/slow", llm_kwargs=server.llm_kwargs(), process=mode)
            mem = Memory(Path(d) / f"{mode}.db", **kw)
            mem.add("warm", "up")  # load the embedding model outside the timing
            times = timed_adds(mem, items)
            st = mem.stats()
            t = time.perf_counter()
            mem.close()
            out["modes"][mode] = {"add_ms_p50": pct(times, 0.5), "add_ms_p95": pct(times, 0.95),
                                  "max_ms": round(max(times), 1), "pending_after_adds": st["pending_steps"],
                                  "close_s": round(time.perf_counter() - t, 1)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
