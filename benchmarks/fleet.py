"""Fleet throughput (issue 32): memory files drained per minute by ``memsif_lite.fleet`` on a
``LocalCluster`` of 1, 2 and 4 worker processes (one thread each), against the test suite's fake
OpenAI-compatible server over real HTTP with every reply delayed ``--llm-latency`` seconds (a
stand-in for a real model's time per call).

    nice -n 19 python benchmarks/fleet.py [--files 16] [--workers 1 2 4] [--llm-latency 0.2 0]

Each run drains a fresh copy of the same home (``--files`` per-user files of ``--messages``
messages, written with their processing left for later); the cluster's start (worker processes
importing memsif, litellm and loading the embedding model on their first file) is timed apart
from the drain. Prints one JSON document. ``--ray`` also runs the same per-file tasks on Ray
(``ray`` must be importable; it is not a dependency of memsif).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _common import machine  # noqa: E402
from fakes import FakeLLMServer  # noqa: E402

MODEL = "openai/fleet-bench"


def reply(req: dict) -> str:
    """Valid, fixed replies for every judge (no fallbacks, no warnings)."""
    from memsif_lite import prompts

    return {prompts.BOUNDARY_SYSTEM: '{"continues": true}', prompts.TRAJECTORY_SYSTEM: '{"compatible": []}',
            prompts.TITLE_SYSTEM: '{"title": "Plans"}', prompts.EXTRACT_SYSTEM: '{"facts": []}',
            prompts.OPERATION_SYSTEM: '{"op": "add", "target": null}'}.get(req["messages"][0]["content"], "{}")


def make_home(home: Path, files: int, messages: int) -> None:
    from memsif_lite.embed import OnnxEmbedder
    from memsif_lite.homes import open_memory

    emb = OnnxEmbedder()
    for i in range(files):
        with open_memory(user=f"u{i:03d}", home=home, process="manual", embedder=emb) as mem:
            mem.remember([{"speaker": "Ana" if j % 2 else "Leo", "text": f"Plan {j} for trip {i}: book the train.",
                           "at": f"2024-01-{1 + j // 4:02d}T10:{j % 60:02d}:00", "session": str(j // 4)}
                          for j in range(messages)])


def drain_dask(home: Path, workers: int, server: FakeLLMServer) -> dict[str, Any]:
    import distributed

    from memsif_lite.fleet import process_fleet

    t0 = time.perf_counter()
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        started = time.perf_counter() - t0
        client.run(_warm)  # imports and the model, as a long-lived cluster has them
        warmed = time.perf_counter() - t0 - started
        report = process_fleet(home, client, llm=MODEL, llm_kwargs=server.llm_kwargs())
    assert not report.failed, report.failed
    return {"start_s": round(started, 2), "warm_s": round(warmed, 2), "drain_s": report.seconds,
            "steps": report.steps, "files_per_min": round(60 * len(report.files) / report.seconds, 1)}


def _warm() -> None:
    from memsif_lite.embed import OnnxEmbedder
    from memsif_lite.llm import import_litellm

    import_litellm()

    OnnxEmbedder().embed(["warm"], kind="passage")


def drain_ray(home: Path, workers: int, server: FakeLLMServer) -> dict[str, Any]:
    import ray

    from memsif_lite.fleet import home_files, process_file

    t0 = time.perf_counter()
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(num_cpus=1, max_retries=2)(process_file)
        warm = ray.remote(num_cpus=1)(_warm)
        started = time.perf_counter() - t0
        ray.get([warm.remote() for _ in range(workers)])
        warmed = time.perf_counter() - t0 - started
        paths, _ = home_files(home)
        t1 = time.perf_counter()
        results = ray.get([task.remote(str(p), MODEL, server.llm_kwargs()) for p in paths])
        drain = time.perf_counter() - t1
    finally:
        ray.shutdown()
    return {"start_s": round(started, 2), "warm_s": round(warmed, 2), "drain_s": round(drain, 3),
            "steps": sum(r.steps for r in results), "files_per_min": round(60 * len(paths) / drain, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--messages", type=int, default=6)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--llm-latency", type=float, nargs="+", default=[0.2, 0.0])
    ap.add_argument("--ray", action="store_true", help="also run the same tasks on Ray")
    args = ap.parse_args()
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "files": args.files,
                 "messages_per_file": args.messages, "runs": []}
    engines = [("dask", drain_dask)] + ([("ray", drain_ray)] if args.ray else [])
    with tempfile.TemporaryDirectory() as d:
        template = Path(d) / "template"
        make_home(template, args.files, args.messages)
        for latency in args.llm_latency:
            with FakeLLMServer(default=lambda req, s=latency: {"sleep": s, "content": reply(req)}) as server:
                for engine, drain in engines:
                    for n in args.workers:
                        home = Path(d) / f"{engine}-{n}-{latency}"
                        shutil.copytree(template, home)
                        before = len(server.requests)
                        run = drain(home, n, server)
                        run.update(engine=engine, workers=n, llm_latency_s=latency,
                                   llm_calls=len(server.requests) - before)
                        out["runs"].append(run)
                        print(json.dumps(run), file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
