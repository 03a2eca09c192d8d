"""``memsif view`` in a real browser: headless Chromium (Debian's ``chromium`` package) opens the
page of the demo memory, of a hostile file and of a 100,000-message file, and this script reports
how long each page takes to open, its size and the browser's JavaScript heap, takes a screenshot of
each, and checks that the search box finds a message, that a fact "click" shows its history and
the messages it rests on, and that the hostile file runs no script.

    python benchmarks/view.py --out benchmarks/results/view.txt [--messages 100000] [--keep DIR] \
        [--data ../shared/data/locomo]

How it measures: the page writes, when it has drawn itself, ``data-ready-ms`` (``performance.now()``
then: milliseconds since the browser started to open the page, so reading and parsing the HTML,
the JSON and the first drawing are all in it), ``data-heap-bytes`` (``performance.memory``, with
``--enable-precise-memory-info``) and ``data-draw-ms`` (how long its last drawing of the timeline
took: what each step of a zoom or a drag costs) on its ``<body>``, and 3 s later the heap after a full
garbage collection (in a fourth run, with ``--expose-gc``: what stays once the page's JSON text is
collected); ``chromium --dump-dom`` prints the DOM
once the page has loaded. Three cold runs each (a fresh browser every time); the median is
reported, and the wall time of the whole browser run next to it. The search and the fact click go
through the page's own navigation (``#search=WORDS``, ``#fact=ID``: what clicking a link does).

The 100,000-message file: the synthetic conversation of ``scale.py`` (topic words and filler, vectors
from a table, so embedding costs nothing), spread over about four years in sessions of 20-100
messages with gaps of hours, days and weeks, and every 500th message a first-person statement the
offline extractor makes a CoreFact of ("I moved to Porto."), so facts are written and superseded.
With ``--data`` a second one has the same times and vectors but the text and speakers of the LoCoMo
turns in that folder, cycled (143 characters a message on average, against 53 for the synthetic
text): what a page of real conversation weighs. Both are built once, into ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CACHE, machine  # noqa: E402
from scale import TableEmbedder, generate  # noqa: E402

from memsif_lite import Config, Memory  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CITIES = ["Porto", "Lisbon", "Madrid", "Berlin", "Oslo", "Dublin", "Prague", "Vienna", "Milan", "Ghent"]
HOSTILE = [
    {"speaker": "Mallory", "text": "<script>document.body.setAttribute('data-pwned','1')</script> hello"},
    {"speaker": "Mallory", "text": "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"},
    {"speaker": "</script><script>document.body.setAttribute('data-pwned','3')</script>",
     "text": "a speaker named </script>, and <!-- a comment --> and ]]> and \u2028 line separators \u2029"},
    {"speaker": "Mallory", "text": "</style><style>body{display:none}</style> I moved to <b>Porto</b>.",
     "session": "</title><svg onload=\"document.body.setAttribute('data-pwned','4')\">"},
    {"speaker": "Mallory", "text": "javascript:alert(1) {{data}} {{js}} <a href=\"javascript:alert(2)\">link</a>"},
]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    sys.exit("no Chromium found: apt-get install chromium")


def browse(url: str, *, screenshot: Path | None = None, size: str = "1400,1100", virtual_ms: int = 0
           ) -> tuple[str, float]:
    """One cold headless run: the DOM once loaded (or a screenshot), and the run's wall time."""
    with tempfile.TemporaryDirectory(prefix="memsif-chromium-") as profile:
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-precise-memory-info",
               "--hide-scrollbars", "--no-first-run", f"--user-data-dir={profile}", f"--window-size={size}"]
        cmd += [f"--virtual-time-budget={virtual_ms}", "--js-flags=--expose-gc"] if virtual_ms else []
        cmd += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        t = time.perf_counter()
        out = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=120)
        wall = time.perf_counter() - t
    if screenshot is None and "<body" not in out.stdout:
        raise RuntimeError(f"chromium printed no DOM for {url}: {out.stderr[-2000:]}")
    return out.stdout, wall


def body(dom: str) -> dict[str, str]:
    tag = re.search(r"<body([^>]*)>", dom)
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag.group(1))) if tag else {}


def block(dom: str, element_id: str) -> str:
    """The markup of the element with this id, up to its closing tag (lists and sections here)."""
    m = re.search(rf'<(\w+)[^>]*\bid="{element_id}"[^>]*>', dom)
    if not m:
        return ""
    end = dom.find(f"</{m.group(1)}>", m.end())
    return dom[m.start(): end]


def opening(url: str, runs: int = 3) -> dict:
    ready, heap, wall, draw, attrs = [], [], [], [], {}
    for _ in range(runs):
        dom, w = browse(url)
        attrs = body(dom)
        ready.append(int(attrs["data-ready-ms"]))
        draw.append(float(attrs["data-draw-ms"]))
        heap.append(int(attrs.get("data-heap-bytes") or 0))
        wall.append(w)
    # what stays on the heap: 3 s later, after a full garbage collection (the page's timer calls gc(), which
    # --expose-gc provides; virtual time: the timer runs before the DOM is printed)
    later = int(body(browse(url, virtual_ms=5000)[0]).get("data-heap-later-bytes") or 0)
    return {"ready_ms": int(statistics.median(ready)), "ready_ms_runs": ready,
            "js_heap_mb": round(statistics.median(heap) / 1e6, 1), "js_heap_later_mb": round(later / 1e6, 1),
            "browser_wall_s": round(statistics.median(wall), 2), "draw_ms": statistics.median(draw),
            "drawn": {k[5:]: int(v) for k, v in attrs.items() if k in ("data-messages", "data-segments",
                                                                       "data-trajectories", "data-facts")}}


def check_search(url: str, word: str, expect: int) -> dict:
    dom, _ = browse(url + "#search=" + word)
    results = block(dom, "results")
    ids = [int(i) for i in re.findall(r'href="#msg=(\d+)"', results)]
    summary = re.sub(r"<[^>]+>", "", block(dom, "search-summary")).strip()
    return {"words": urllib.parse.unquote(word), "expected_message": expect, "found": expect in ids, "listed": len(ids),
            "summary": summary}


def check_fact(url: str, fact_id: int) -> dict:
    dom, _ = browse(url + f"#fact={fact_id}")
    title = re.sub(r"<[^>]+>", "", block(dom, "detail-title")).strip()
    detail = block(dom, "detail")
    ops = re.findall(r'<td class="nw">(add|update|merge|supersede|superseded)</td>', detail)
    return {"fact": fact_id, "title": title, "history_rows": len(ops), "history_ops": ops,
            "source_messages": len(set(re.findall(r'href="#msg=(\d+)"', detail)))}


def page(mem: Memory, dest: Path) -> dict:
    t = time.perf_counter()
    p = mem.view(dest)
    return {"render_s": round(time.perf_counter() - t, 2), "page_mb": round(p.bytes / 1e6, 2), "stats": p.stats}


def demo(work: Path) -> dict:
    db = work / "demo.db"
    subprocess.run([sys.executable, "-m", "memsif_lite.cli", "demo", "--db", str(db)], check=True,
                   capture_output=True)
    html = work / "demo.html"
    with Memory(db, read_only=True) as mem:
        out = page(mem, html)
        biscuit = [m.id for m in mem.messages() if "Biscuit" in m.text]
        facts = mem.facts(include_superseded=True)
        fact = next((f.id for f in facts if f.subject == "Maya"), facts[0].id)
    url = html.resolve().as_uri()
    out |= opening(url)
    out["search"] = check_search(url, "Biscuit", biscuit[0])
    out["fact_click"] = check_fact(url, fact)
    # docs/view.png (README) is a copy of this one
    browse(url + f"#search=Porto&fact={fact}", screenshot=RESULTS / "view_demo.png", size="1300,1000")
    return out


def hostile(work: Path) -> dict:
    db = work / "hostile.db"
    rng = np.random.default_rng(1)
    emb = TableEmbedder(rng.standard_normal((1, 384)).astype(np.float32), {})
    with Memory(db, embedder=emb) as mem:
        mem.add_many([{**m, "at": f"2024-05-0{1 + i // 3}T10:0{i}:00"} for i, m in enumerate(HOSTILE)])
        out = page(mem, work / "hostile.html")
    url = (work / "hostile.html").resolve().as_uri()
    out |= opening(url, runs=1)
    dom, _ = browse(url + "#search=script")
    pwned = re.findall(r"<[a-z][^>]*\sdata-pwned=", dom)
    out |= {"ran_injected_script": bool(pwned), "messages_drawn": int(body(dom)["data-messages"]),
            "hostile_text_shown_as_text": "&lt;script&gt;document.body.setAttribute" in dom}
    browse(url + "#msg=3", screenshot=RESULTS / "view_hostile.png", size="1400,900")
    return out


def big_messages(n: int, data: str | None = None) -> tuple[list[dict], TableEmbedder]:
    msgs, V, index, _ = generate(n)
    if data:  # LoCoMo's turns (speakers and text) in the synthetic conversation's places, same vectors
        from _common import conversation_files

        from memsif_lite.importers import locomo_turns

        turns = [t for _, s in conversation_files(data) for t in locomo_turns(s["conversation"])]
        for i, m in enumerate(msgs):
            t = turns[i % len(turns)]
            m["speaker"], m["text"] = t["speaker"], t["text"]
            index[f"{t['speaker']}: {t['text']}"] = i
    rng = np.random.default_rng(7)
    t = 1_672_531_200  # 2023-01-01
    left, session = 0, 0
    for i, m in enumerate(msgs):
        if left == 0:
            left, session = int(rng.integers(20, 101)), session + 1
            kind = rng.random()
            t += int(rng.integers(3600, 12 * 3600) if kind < 0.8 else rng.integers(86400, 3 * 86400) if kind < 0.98
                     else rng.integers(7 * 86400, 35 * 86400))
        else:
            t += int(rng.integers(20, 300))
        left -= 1
        if i % 500 == 250:  # a fact the offline extractor writes; the next one of this speaker supersedes it
            m["text"] = f"I moved to {CITIES[(i // 500) % len(CITIES)]}."
        m["at"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
        m["session"] = str(session)
    return msgs, TableEmbedder(V, index)


def big(work: Path, n: int, keep: Path | None, data: str | None = None) -> dict:
    db = (keep or work) / f"view-{n}-{'locomo' if data else 'synthetic'}.db"
    msgs, emb = big_messages(n, data)
    out: dict = {}
    if not db.exists():
        t = time.perf_counter()
        with Memory(db, embedder=emb, config=Config(sem_low=0.0, sem_high=0.64)) as mem:
            for start in range(0, n, 2000):
                mem.add_many(msgs[start:start + 2000])
        out["ingest_s"] = round(time.perf_counter() - t)
    html = work / f"{db.stem}.html"
    with Memory(db, embedder=emb, read_only=True) as mem:
        out |= page(mem, html)
        facts = mem.facts(include_superseded=True)
        old = next((f for f in facts if f.valid_to is not None), facts[0] if facts else None)
        first, last = mem.messages(limit=1)[0], mem.messages(limit=1, offset=n - 1)[0]
    url = html.resolve().as_uri()
    out |= opening(url)
    if data:  # the four longest words of a message in the middle (its text recurs: every copy matches)
        target = n // 2 + 1
        words = sorted(set(re.findall(r"[A-Za-z]{4,}", msgs[target - 1]["text"])), key=lambda w: (-len(w), w))[:4]
        out["search"] = check_search(url, "%20".join(words) or "the", target)
    else:
        target = n // 2 + 17
        out["search"] = check_search(url, f"%23{target}", target + 1)  # "#50017": message 50018's own number
    if old is not None:
        out["fact_click"] = check_fact(url, old.id)
    name = f"view_100k{'_locomo' if data else ''}"
    browse(url, screenshot=RESULTS / f"{name}.png")
    mid = (first.at.timestamp() + last.at.timestamp()) / 2
    browse(url + f"#zoom={int(mid)},{int(mid + 7 * 86400)}", screenshot=RESULTS / f"{name}_week.png")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--out", default=str(RESULTS / "view.txt"))
    ap.add_argument("--keep", default=str(CACHE), help="keep the large memory files here (built once)")
    ap.add_argument("--data", default=None, help="a LoCoMo folder: also a large file with its turns' text")
    args = ap.parse_args()
    keep = Path(args.keep)
    keep.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([chromium(), "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="memsif-view-bench-") as d:
        work = Path(d)
        runs = {"demo": demo(work), "hostile": hostile(work),
                f"{args.messages} synthetic": big(work, args.messages, keep)}
        if args.data:
            runs[f"{args.messages} LoCoMo text"] = big(work, args.messages, keep, args.data)
    command = "python benchmarks/view.py --out benchmarks/results/view.txt" + (f" --data {args.data}" if args.data
                                                                              else "")
    report = {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "browser": version, "command": command,
              "runs": runs}
    lines = [f"memsif view in headless Chromium — {report['date']}, {report['machine']}, {version}",
             f"command: {report['command']}", "",
             "| memory | messages | page MB | render s (Memory.view) | opens in ms (median of 3; runs) "
             "| JS heap MB at open / live after GC | one timeline drawing ms | browser run s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        lines.append(f"| {name} | {r['stats']['messages']} | {r['page_mb']} | {r['render_s']} | {r['ready_ms']} "
                     f"({', '.join(map(str, r['ready_ms_runs']))}) | {r['js_heap_mb']} / {r['js_heap_later_mb']} "
                     f"| {r['draw_ms']} | {r['browser_wall_s']} |")
    lines += ["", "checks:"]
    for name, r in runs.items():
        for key in ("search", "fact_click"):
            if key in r:
                lines.append(f"  {name} {key}: {json.dumps(r[key])}")
        if "ran_injected_script" in r:
            lines.append(f"  {name}: ran an injected script: {r['ran_injected_script']}; its text shown as text: "
                         f"{r['hostile_text_shown_as_text']}; messages drawn {r['messages_drawn']}")
        lines.append(f"  {name} drawn: {json.dumps(r.get('drawn'))} file: {json.dumps(r['stats'])}")
        if "ingest_s" in r:
            lines.append(f"  {name} built in {r['ingest_s']} s (add_many, 2,000 at a time; table vectors)")
    lines += ["", "screenshots: benchmarks/results/view_demo.png (docs/view.png), view_hostile.png, view_100k*.png",
              "", "json: " + json.dumps(report)]
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[:-2]))


if __name__ == "__main__":
    main()
