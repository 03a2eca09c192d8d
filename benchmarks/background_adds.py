"""add() latency offline and in background mode while a real model server works, at an
assistant's pace (one message every 0.5 s), with the app and the server on separate cores.

    taskset -c 1 python -m llama_cpp.server --model F --chat_format gemma --n_threads 1 --port 8089 &
    taskset -c 0 python benchmarks/background_adds.py http://127.0.0.1:8089/v1 [--messages 24]

On a 2-core machine the server's generation otherwise takes both cores and every add() waits for
CPU, which measures the machine rather than the library.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, pct, timed_adds  # noqa: E402


def main() -> None:
    from memsif_lite import Config, Memory
    from memsif_lite.importers import read_jsonl

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("api_base")
    ap.add_argument("--messages", type=int, default=24)
    ap.add_argument("--pace", type=float, default=0.5, help="seconds between two adds")
    args = ap.parse_args()
    with resources.as_file(resources.files("memsif_lite.data").joinpath("sample_conversation.jsonl")) as p:
        items = read_jsonl(p)[: args.messages]
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": machine()}
    with tempfile.TemporaryDirectory() as d:
        for mode in ("offline", "background"):
            kw: dict = {} if mode == "offline" else {
                "llm": "openai/local", "llm_kwargs": {"api_base": args.api_base, "api_key": "local"},
                "process": "background"}
            with Memory(Path(d) / f"{mode}.db", config=Config(llm_timeout_s=300, llm_retries=0), **kw) as mem:
                ms = timed_adds(mem, items, pace=args.pace)  # the worker is busy with the model meanwhile
                out[mode] = {"add_ms_p50": pct(ms, 0.5), "add_ms_p95": pct(ms, 0.95),
                             "pending_at_end": mem.stats()["pending_steps"]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
