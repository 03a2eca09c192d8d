"""What encryption at rest costs: ``add`` (ingest) and ``context`` p50 on an encrypted file
against a plain one in the same run, the cost of opening, the file size, and what the engine
(apsw-sqlite3mc instead of apsw) costs to install and on plain files.

    python benchmarks/encryption.py --data ../shared/data/locomo --out benchmarks/results/encryption.txt
    python benchmarks/encryption.py --data ../shared/data/locomo --engines   # also: plain apsw vs apsw-sqlite3mc

Both files get the same LoCoMo messages, one ``add`` at a time, alternately (which one goes first
alternates too), so both meet the same machine load; then the same questions alternately
(``context``, budget 1000). Passage vectors come from the benchmarks' on-disk cache (warmed first,
so neither file pays for the model); questions are embedded by the bundled model for both. Target:
encrypted / plain p50 <= 1.15.

``--engines`` downloads the two wheels of the installed SQLite version with pip (``pip download
--no-deps``: apsw and apsw-sqlite3mc), reports their sizes packed and installed, and measures the
plain-file workload under each engine in child processes, alternately (``--rounds``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CachedEmbedder, conversation_files, machine, pct  # noqa: E402

KEY = "benchmark passphrase"
DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"


def workload(data: Path, n_messages: int, n_questions: int) -> tuple[list[dict], list[str]]:
    """The first ``n_messages`` turns of the conversations (in order) and questions about them."""
    from memsif_lite.importers import locomo_turns

    msgs: list[dict] = []
    questions: list[str] = []
    for _, sample in conversation_files(data):
        msgs += list(locomo_turns(sample["conversation"]))
        questions += [str(q["question"]) for q in sample.get("qa", []) if q.get("question")]
        if len(msgs) >= n_messages and len(questions) >= n_questions:
            break
    return msgs[:n_messages], questions[:n_questions]


def measure(data: Path, n_messages: int, n_questions: int, keys: list[str | None], cache: bool = True) -> dict:
    """add and context latencies (ms) for a file per key in ``keys``, interleaved."""
    from memsif_lite import Memory
    from memsif_lite.embed import OnnxEmbedder

    msgs, questions = workload(data, n_messages, n_questions)
    emb: Any = OnnxEmbedder()
    if cache:
        emb = CachedEmbedder(emb, "encryption-bench")
        emb.embed([f"{m['speaker']}: {m['text']}" for m in msgs], kind="passage")  # warm (and keep) the cache
        emb.save()
    names = ["plain" if k is None else "encrypted" for k in keys]
    out: dict = {n: {"add_ms": [], "context_ms": []} for n in names}
    with tempfile.TemporaryDirectory() as d:
        mems = {}
        for name, key in zip(names, keys, strict=True):
            t = time.perf_counter()
            mems[name] = Memory(Path(d) / f"{name}.db", embedder=emb, key=key)
            out[name]["create_ms"] = (time.perf_counter() - t) * 1000
        try:
            for i, m in enumerate(msgs):
                for name in names if i % 2 == 0 else names[::-1]:
                    t = time.perf_counter()
                    mems[name].add(**m)
                    out[name]["add_ms"].append((time.perf_counter() - t) * 1000)
            for name in names:
                mems[name].context("warm up", budget_tokens=1000)
            for i, q in enumerate(questions):
                for name in names if i % 2 == 0 else names[::-1]:
                    t = time.perf_counter()
                    mems[name].context(q, budget_tokens=1000)
                    out[name]["context_ms"].append((time.perf_counter() - t) * 1000)
        finally:
            for mem in mems.values():
                mem.close()
        for name, key in zip(names, keys, strict=True):
            path = Path(d) / f"{name}.db"
            out[name]["file_bytes"] = path.stat().st_size
            opens = []
            for _ in range(5):
                t = time.perf_counter()
                Memory(path, embedder=emb, key=key, read_only=True).close()
                opens.append((time.perf_counter() - t) * 1000)
            out[name]["open_ms"] = statistics.median(opens)
    return {"messages": len(msgs), "questions": len(questions),
            "runs": {n: {"add_ms_p50": pct(r["add_ms"], 0.5), "add_ms_p95": pct(r["add_ms"], 0.95),
                         "context_ms_p50": pct(r["context_ms"], 0.5), "context_ms_p95": pct(r["context_ms"], 0.95),
                         "open_ms_median": round(r["open_ms"], 1), "create_ms": round(r["create_ms"], 1),
                         "file_bytes": r["file_bytes"]} for n, r in out.items()}}


def wheels(directory: Path) -> dict[str, Path]:
    """The apsw and apsw-sqlite3mc wheels of the installed SQLite version, downloaded with pip."""
    import apsw

    version = apsw.apsw_version()  # e.g. 3.54.0.0: the same SQLite in both distributions
    found = {}
    for dist in ("apsw", "apsw-sqlite3mc"):
        target = directory / dist
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(target),
                        f"{dist}=={version}"], check=True, capture_output=True)
        found[dist] = next(target.glob("*.whl"))
    return found


def wheel_sizes(whl: Path) -> dict:
    with zipfile.ZipFile(whl) as z:
        return {"wheel_bytes": whl.stat().st_size, "installed_bytes": sum(i.file_size for i in z.infolist())}


def base_install_bytes() -> int:
    """What the base install's direct dependencies take on disk here (their installed files)."""
    from importlib import metadata

    total = 0
    for req in metadata.requires("memsif_lite") or []:
        if "extra ==" in req:
            continue
        name = req.split(";")[0].split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
        for f in metadata.distribution(name).files or []:
            p = Path(str(f.locate()))
            if p.is_file():
                total += p.stat().st_size
    return total


def engines(data: Path, n_messages: int, n_questions: int, rounds: int) -> dict:
    """The plain-file workload under apsw and under apsw-sqlite3mc, in child processes, alternately."""
    out: dict = {"engines": {}}
    with tempfile.TemporaryDirectory() as d:
        whls = wheels(Path(d))
        for dist, whl in whls.items():
            out["engines"][dist] = {"wheel": whl.name, **wheel_sizes(whl), "add_ms_p50": [], "context_ms_p50": []}
        plain_dir = Path(d) / "plain-apsw"
        with zipfile.ZipFile(whls["apsw"]) as z:
            z.extractall(plain_dir)  # first on PYTHONPATH: `import apsw` is the plain one there
        for r in range(rounds):
            for dist in (("apsw", "apsw-sqlite3mc") if r % 2 == 0 else ("apsw-sqlite3mc", "apsw")):
                env = dict(os.environ)
                if dist == "apsw":
                    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plain_dir), env.get("PYTHONPATH")]))
                child = subprocess.run([sys.executable, __file__, "--data", str(data), "--messages", str(n_messages),
                                        "--questions", str(n_questions), "--child"], env=env, check=True,
                                       capture_output=True, text=True)
                res = json.loads(child.stdout)
                assert res["engine_can_encrypt"] == (dist == "apsw-sqlite3mc"), res
                for k in ("add_ms_p50", "context_ms_p50"):
                    out["engines"][dist][k].append(res["runs"]["plain"][k])
    out["base_install_bytes"] = base_install_bytes()
    return out


def report(res: dict, eng: dict | None) -> str:
    p, e = res["runs"]["plain"], res["runs"]["encrypted"]
    cmd = "python benchmarks/encryption.py " + " ".join(sys.argv[1:])
    lines = [f"# {cmd}", f"# {time.strftime('%Y-%m-%d')}, {machine()}",
             f"# {res['messages']} LoCoMo messages (add, one at a time), {res['questions']} questions "
             "(context, budget 1000); plain and encrypted interleaved", "",
             f"{'':24}{'plain':>12}{'encrypted':>12}{'ratio':>8}"]
    for k in ("add_ms_p50", "add_ms_p95", "context_ms_p50", "context_ms_p95", "open_ms_median", "file_bytes"):
        lines.append(f"{k:24}{p[k]:>12}{e[k]:>12}{e[k] / p[k]:>8.3f}")
    verdict = max(e["add_ms_p50"] / p["add_ms_p50"], e["context_ms_p50"] / p["context_ms_p50"])
    lines += ["", f"target: encrypted/plain p50 <= 1.15 for add and context: {'met' if verdict <= 1.15 else 'MISSED'} "
              f"(worst {verdict:.3f})"]
    if eng:
        a, m = eng["engines"]["apsw"], eng["engines"]["apsw-sqlite3mc"]
        lines += ["", "engines (plain files; medians of the rounds' p50s, child processes alternately):",
                  f"{'':24}{'apsw':>16}{'apsw-sqlite3mc':>16}{'diff':>12}"]
        for k in ("wheel_bytes", "installed_bytes"):
            lines.append(f"{k:24}{a[k]:>16}{m[k]:>16}{m[k] - a[k]:>+12}")
        for k in ("add_ms_p50", "context_ms_p50"):
            ma, mm = statistics.median(a[k]), statistics.median(m[k])
            lines.append(f"{k:24}{ma:>16.2f}{mm:>16.2f}{mm / ma:>11.3f}x   rounds: {a[k]} / {m[k]}")
        lines.append(f"base install (direct dependencies, installed here): {eng['base_install_bytes']} bytes; "
                     f"the cipher adds {(m['installed_bytes'] - a['installed_bytes']) / eng['base_install_bytes']:.1%}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo conversations (a folder or a file)")
    ap.add_argument("--messages", type=int, default=800)
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--engines", action="store_true", help="also compare apsw and apsw-sqlite3mc (downloads both)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="write the report here too")
    ap.add_argument("--no-cache", action="store_true", help="embed passages as they are added (no on-disk cache)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # one engine, plain file only
        import apsw

        res = measure(args.data, args.messages, args.questions, [None])
        print(json.dumps({**res, "engine_can_encrypt": hasattr(apsw, "mc_version")}))
        return
    res = measure(args.data, args.messages, args.questions, [None, KEY], cache=not args.no_cache)
    eng = engines(args.data, args.messages, args.questions, args.rounds) if args.engines else None
    text = report(res, eng)
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
