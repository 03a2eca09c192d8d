"""``memsif view`` / ``Memory.view`` (issue 29): the page of a memory file, checked without a browser
(``benchmarks/view.py`` drives a real headless Chromium over the same pages). The page holds exactly
what the file holds (its embedded document read back), stored text can never become markup or
script (a hostile file's page has the very markup of an empty one, and a Content-Security-Policy
allows only the page's own script and style), files are written 0600 and never over another file,
and ``--serve`` answers on 127.0.0.1 only and follows the file as it changes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from fakes import FakeEmbedder
from memsif_lite import InvalidInputError, Memory, MemoryFileError
from memsif_lite.cli import main
from memsif_lite.store import migrations
from memsif_lite.view.data import clip_texts, columns, delta, runs, undelta, unruns

HOSTILE = [
    {"speaker": "Mallory", "text": "<script>alert(1)</script> and </SCRIPT > too", "at": "2024-05-01T10:00:00"},
    {"speaker": "</script>", "text": "a speaker named </script><script>alert(2)</script>", "at": "2024-05-01T10:01:00"},
    {"speaker": "Mallory", "text": "<img src=x onerror=alert(3)> <!-- <script> ]]> \u2028\u2029 & &amp; \"'",
     "at": "2024-05-01T10:02:00", "session": "</style><style>*{display:none}</style>"},
    {"speaker": "<b onmouseover=alert(4)>Eve</b>", "text": "I moved to <i>Porto</i>. {{data}} {{js}} {{csp}}",
     "at": "2024-05-03T10:00:00", "session": "<svg onload=alert(5)>", "source_id": "</script>"},
]
_EPOCH = datetime(1970, 1, 1)


def secs(dt: datetime) -> int:
    return (dt - _EPOCH) // timedelta(seconds=1)


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


class Page(HTMLParser):
    """Every start tag with its attributes, and the text of each script and style element."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=False)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.styles: list[str] = []
        self._in: str | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in = tag
            (self.scripts.append((dict(attrs), "")) if tag == "script" else self.styles.append(""))

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts[-1] = (self.scripts[-1][0], self.scripts[-1][1] + data)
        elif self._in == "style":
            self.styles[-1] += data

    @property
    def document(self) -> dict:
        (data,) = [text for a, text in self.scripts if a.get("type") == "application/json"]
        return json.loads(data)

    @property
    def policy(self) -> dict[str, list[str]]:
        (csp,) = [a["content"] for t, a in self.tags
                  if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
        return {d.split()[0]: d.split()[1:] for d in (csp or "").split(";") if d.strip()}


def sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    r = run("demo", "--db", db)
    assert r.exit_code == 0, r.output
    return db


# -- what the page holds ---------------------------------------------------------------------------
def test_the_demo_page_holds_every_message_segment_trajectory_and_fact(demo_db, tmp_path):
    out = tmp_path / "memory.html"
    r = run("view", "--db", demo_db, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert set(summary) == {"db", "out", "bytes", "stats"} and summary["bytes"] == out.stat().st_size
    assert out.stat().st_mode & 0o777 == 0o600
    doc = Page(out.read_text(encoding="utf-8")).document
    with Memory(demo_db, read_only=True) as mem:
        msgs, segs, trajs = mem.messages(), mem.segments(), mem.trajectories()
        facts = mem.facts(include_superseded=True)
        history = {f.id: mem.fact_history(f.id) for f in facts}
        assert doc["stats"] == summary["stats"] == mem.stats()
    assert len(msgs) == 41 and len(segs) == 18 and len(trajs) == 8 and len(facts) == 7  # the demo as it is
    cols = columns(doc)
    seg_of = {m: s.id for s in segs for m in s.message_ids}
    assert cols == {"id": [m.id for m in msgs], "t": [secs(m.at) for m in msgs],
                    "off": [m.utc_offset_min for m in msgs], "speaker": [m.speaker for m in msgs],
                    "session": [m.session for m in msgs], "segment": [seg_of.get(m.id) for m in msgs],
                    "text": [m.text for m in msgs]}
    assert doc["s"] == {"id": [s.id for s in segs], "tr": [s.trajectory_id or 0 for s in segs],
                        "a": [secs(s.start) for s in segs], "b": [secs(s.end) for s in segs],
                        "c": [int(s.closed) for s in segs], "l": [s.label for s in segs]}
    assert doc["tr"] == {"id": [t.id for t in trajs], "a": [secs(t.start) for t in trajs],
                         "b": [secs(t.end) for t in trajs], "l": [t.label for t in trajs]}
    f = doc["f"]
    assert f["id"] == [x.id for x in facts] and f["x"] == [x.stmt for x in facts]
    assert f["su"] == [x.subject for x in facts] and f["ty"] == [x.type for x in facts]
    assert f["a"] == [secs(x.valid_from) for x in facts] and f["b"] == [None] * len(facts)
    assert f["src"] == [list(x.message_ids) for x in facts]
    assert f["h"] == [[[secs(e.at), e.op, e.stmt, e.detail] for e in history[x.id]] for x in facts]
    assert doc["q"] == {"n": 0, "oldest": None, "kinds": {}, "rows": []}
    assert doc["file"]["name"] == "demo.db" and doc["file"]["schema"] == len(migrations())
    assert doc["file"]["model"] and doc["file"]["bytes"] == demo_db.stat().st_size
    assert doc["live"] is None and doc["m"]["clipped"] == 0


def test_a_superseded_fact_ends_where_it_was_superseded_and_the_current_one_stays_open(memory):
    mem = memory()
    mem.add_many([
        {"speaker": "Maya", "text": "I live in Lisbon, near the castle.", "at": "2024-01-10T09:00:00", "session": "1"},
        {"speaker": "Maya", "text": "I moved to Porto! I signed the lease last week.", "at": "2024-03-16T20:31:00",
         "session": "2"},
        {"speaker": "Leo", "text": "See you at the housewarming on Saturday!", "at": "2024-03-20T18:00:00",
         "session": "3"},
    ])
    facts = {x.id: x for x in mem.facts(include_superseded=True)}
    old = [x for x in facts.values() if x.valid_to is not None]
    assert old, "the Lisbon fact is superseded"
    f = Page(mem.view().html).document["f"]
    for i, fid in enumerate(f["id"]):
        want = facts[fid]
        assert f["b"][i] == (secs(want.valid_to) if want.valid_to else None) and f["by"][i] == want.superseded_by
    lisbon = f["id"].index(old[0].id)
    assert f["b"][lisbon] == secs(datetime(2024, 3, 16, 20, 31))
    assert "superseded" in [e[1] for e in f["h"][lisbon]]
    assert f["b"][f["id"].index(old[0].superseded_by)] is None


def test_the_backlog_lists_the_pending_steps(memory):
    mem = memory(process="manual")
    mem.add_many([{"speaker": "A", "text": f"message {i}", "at": f"2024-01-0{i + 1}T10:00:00"} for i in range(3)])
    q = Page(mem.view().html).document["q"]
    assert q["n"] == mem.stats()["pending_steps"] == 3 and q["kinds"] == {"place": 3}
    assert [row[:2] for row in q["rows"]] == [["place", 1], ["place", 2], ["place", 3]]
    assert q["oldest"] is not None


# -- stored text never becomes markup ----------------------------------------------------------------
def test_a_hostile_file_has_the_markup_of_an_empty_one_and_its_text_comes_back_exactly(memory, tmp_path):
    empty = Page(memory(path=tmp_path / "empty.db").view().html)
    mem = memory()
    mem.add_many(HOSTILE)
    html = mem.view().html
    page = Page(html)
    assert page.tags == empty.tags  # no element, attribute or script of the data's making
    assert [a for a, _ in page.scripts] == [{"type": "application/json", "id": "memsif-data"}, {}]
    doc = page.document
    assert columns(doc)["text"] == [m["text"] for m in HOSTILE]
    assert columns(doc)["speaker"] == [m["speaker"] for m in HOSTILE]
    assert doc["m"]["sessions"] == ["</style><style>*{display:none}</style>", "<svg onload=alert(5)>"]
    data = [text for a, text in page.scripts if a.get("type")][0]
    assert not re.search(r"[<>&\u2028\u2029]", data)
    for needle in ("<script>alert", "</script><script>", "<img src=x", "<!-- <script>", "<svg onload", "\u2028"):
        assert needle not in html


def test_the_policy_allows_only_the_pages_own_script_and_style(demo_db):
    with Memory(demo_db, read_only=True) as mem:
        page, live = Page(mem.view().html), Page(mem.view(live="stamp").html)
    (js,) = [text for a, text in page.scripts if not a]
    (css,) = page.styles
    assert page.policy == {"default-src": ["'none'"], "script-src": [sha(js)], "style-src": [sha(css)],
                           "connect-src": ["'none'"], "img-src": ["'none'"], "base-uri": ["'none'"],
                           "form-action": ["'none'"]}
    assert live.policy == {**page.policy, "connect-src": ["'self'"]}
    assert live.document["live"] == "stamp"
    # nothing in the markup loads anything: no src, no external href, no link/img/iframe/object/embed
    assert not [t for t, a in page.tags if "src" in a or t in ("link", "img", "iframe", "object", "embed", "base")]
    assert [t for t, a in page.tags if a.get("href")] == []
    assert [(t, k) for t, a in page.tags for k in a if k.startswith("on")] == []


def test_the_script_shows_stored_text_only_as_text():
    parts = {n: resources.files("memsif_lite.view").joinpath(n).read_text(encoding="utf-8")
             for n in ("page.html", "view.js", "view.css")}
    js = parts["view.js"]
    for never in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(",
                  "srcdoc", "javascript:", "DOMParser", "createContextualFragment", "setTimeout('", "setTimeout(\""):
        assert never not in js, never
    assert re.findall(r"setAttribute\('style'|\.src\s*=|\.href\s*=", js) == []
    assert js.isascii() and "</script" not in js.lower() and "</style" not in parts["view.css"].lower()
    assert re.findall(r"\{\{(\w+)\}\}", parts["page.html"]) == ["csp", "css", "data", "js"]


@given(st.lists(st.integers(min_value=-(2**53), max_value=2**53)))
def test_delta_coding_round_trips(xs):
    assert undelta(delta(xs)) == xs


@given(st.lists(st.one_of(st.none(), st.integers(-900, 900), st.text(max_size=3))))
def test_run_length_coding_round_trips(xs):
    assert unruns(runs(xs)) == xs


@given(st.lists(st.text(max_size=400), max_size=30), st.integers(min_value=0, max_value=6000),
       st.integers(min_value=0, max_value=800))
def test_long_texts_are_shortened_only_to_fit_the_budget(texts, budget, cap):
    def size(t: str) -> int:
        return len(t.encode("utf-8"))

    before = list(texts)
    n = clip_texts(texts, budget, cap)
    changed = [i for i, (a, b) in enumerate(zip(before, texts, strict=True)) if a != b]
    assert n == len(changed)
    for i in changed:  # a prefix of whole characters and an ellipsis, within the cap
        assert texts[i].endswith("\u2026") and before[i].startswith(texts[i][:-1])
        assert 197 <= size(texts[i]) <= max(cap, 200) and size(texts[i]) < size(before[i])
    assert sum(map(size, texts)) <= budget or all(size(t) <= 200 for t in texts)
    if sum(map(size, before)) <= budget and all(size(t) <= max(cap, 200) for t in before):
        assert n == 0


# -- writing the page ----------------------------------------------------------------------------------
def test_the_page_is_0600_replaces_a_view_and_never_another_file(memory, tmp_path):
    mem = memory()
    mem.add("A", "hello")
    dest = tmp_path / "v.html"
    previous = os.umask(0)
    try:
        page = mem.view(dest)
    finally:
        os.umask(previous)
    assert dest.stat().st_mode & 0o777 == 0o600 and page.path == dest and page.bytes == dest.stat().st_size
    mem.add("A", "again")
    assert mem.view(dest).stats["messages"] == 2  # a previous view is replaced
    assert Page(dest.read_text(encoding="utf-8")).document["stats"]["messages"] == 2
    other = tmp_path / "notes.txt"
    other.write_text("keep me")
    with pytest.raises(InvalidInputError, match="not a memsif view"):
        mem.view(other)
    assert other.read_text() == "keep me"
    link = tmp_path / "link.html"
    link.symlink_to(dest)
    with pytest.raises(InvalidInputError, match="symbolic link"):
        mem.view(link)
    for own in (mem.path, Path(f"{mem.path}-wal"), Path(f"{mem.path}-shm")):
        with pytest.raises(InvalidInputError, match="memory file"):
            mem.view(own)
    with pytest.raises(InvalidInputError, match="no directory"):
        mem.view(tmp_path / "missing" / "v.html")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".memsif-view")) == []


def test_view_reads_only(memory, db):
    mem = memory()
    mem.add("A", "hello")
    mem.close()
    before = db.read_bytes()
    with Memory(db, read_only=True, embedder=FakeEmbedder()) as ro:
        page = ro.view()
    assert page.path is None and page.bytes == 0 and "hello" in columns(Page(page.html).document)["text"]
    assert db.read_bytes() == before
    with pytest.raises(MemoryFileError, match="closed"):
        ro.view()
    with pytest.raises(InvalidInputError, match="live"):
        memory().view(live=3)


# -- the command line -----------------------------------------------------------------------------------
def test_view_command_errors_and_usage(demo_db, tmp_path):
    r = run("view", "--db", tmp_path / "nope.db", "--out", tmp_path / "v.html")
    assert r.exit_code == 1 and "no memory file" in r.output
    assert not (tmp_path / "nope.db").exists() and not (tmp_path / "v.html").exists()
    r = run("view", "--db", demo_db, "--port", "9000")
    assert r.exit_code == 2 and "--port is the port of --serve" in r.output
    r = run("view", "--db", demo_db, "--serve", "--out", tmp_path / "v.html")
    assert r.exit_code == 2 and "not both" in r.output
    (tmp_path / "keep.txt").write_text("mine")
    r = run("view", "--db", demo_db, "--out", tmp_path / "keep.txt")
    assert r.exit_code == 1 and "not a memsif view" in r.output and "Traceback" not in r.output
    r = run("view", "--db", demo_db, "--out", tmp_path / "v.html")
    assert r.exit_code == 0 and r.output.startswith(f"wrote {tmp_path / 'v.html'} (") and "41 messages" in r.output


def test_view_open_hands_the_page_to_the_browser(demo_db, tmp_path):
    seen = tmp_path / "seen.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > "{seen}"\n')
    browser.chmod(0o700)
    out = tmp_path / "v.html"
    r = subprocess.run([sys.executable, "-m", "memsif_lite.cli", "view", "--db", str(demo_db), "--out", str(out),
                        "--open"], capture_output=True, text=True, env={**os.environ, "BROWSER": str(browser)},
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert seen.read_text() == out.resolve().as_uri()


def _get(url: str, host: str | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, method=method, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _interruptible() -> None:
    """In the served view's process: Ctrl-C as a terminal gives it. A test run started in the
    background of a non-interactive shell ignores SIGINT, and a child inherits that (Python then
    installs no KeyboardInterrupt handler): the SIGINT below would go unheard."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_serve_answers_on_127_0_0_1_and_follows_the_file(demo_db, tmp_path, embedder):
    import shutil

    db = tmp_path / "live.db"
    shutil.copy(demo_db, db)
    proc = subprocess.Popen([sys.executable, "-m", "memsif_lite.cli", "view", "--db", str(db), "--serve", "--port",
                             "0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()  # type: ignore
    try:
        line = lines.get(timeout=120)
        url = re.search(r"at (http://\S+/) ", line).group(1)
        assert url.startswith("http://127.0.0.1:")
        status, headers, body = _get(url)
        assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
        assert "connect-src 'self'" in headers["Content-Security-Policy"] and headers["Cache-Control"] == "no-store"
        doc = Page(body.decode("utf-8")).document
        stamp = json.loads(_get(url + "stamp")[2])["stamp"]
        assert doc["live"] == stamp and doc["stats"]["messages"] == 41
        assert _get(url, host="memory.example.com")[0] == 403  # another name for 127.0.0.1: refused
        assert _get(url, method="POST")[0] == 501 and _get(url + "nothing")[0] == 404
        root = url.split("/", 3)
        assert len(root[3]) > 30  # a secret path: another local user reaching 127.0.0.1 cannot guess it
        for guess in (f"{root[0]}//{root[2]}/", f"{root[0]}//{root[2]}/stamp", f"{root[0]}//{root[2]}/x/"):
            assert _get(guess)[0] == 404
        with Memory(db, embedder=embedder) as mem:  # the assistant writes
            mem.add("Leo", "Watching the view update live!", at="2024-11-02T10:00:00")
        assert json.loads(_get(url + "stamp")[2])["stamp"] != stamp  # the page polls this, then reloads
        doc = Page(_get(url)[2].decode("utf-8")).document
        assert doc["stats"]["messages"] == 42 and "Watching the view update live!" in doc["m"]["x"]
        assert _get(url)[2] == _get(url)[2]  # the same file: the same page, not made again
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1]
            raise AssertionError(f"memsif view --serve did not stop on SIGINT; stderr: {err!r}") from None
    assert proc.returncode == 0
    summary = json.loads(out)
    assert set(summary) == {"db", "url", "requests", "renders", "stats"}
    assert summary["url"] == url and summary["renders"] == 2 and summary["stats"]["messages"] == 42
