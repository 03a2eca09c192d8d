"""Smoke tests of the benchmark scripts on bundled fixtures (never ../shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES

ROOT = Path(__file__).resolve().parent.parent


def _run(*args, cwd):
    r = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.mark.slow
def test_locomo_benchmark_shape_and_single_turn_recall(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("locomo_tiny.json", "locomo_single.json"):
        (data / name).write_text((FIXTURES / name).read_text())
    out = tmp_path / "results.json"
    r = _run(str(ROOT / "benchmarks" / "locomo.py"), "--data", str(data), "--out", str(out), "--no-cache",
             "--budgets", "60,500", cwd=tmp_path)
    res = json.loads(out.read_text())
    assert res["data"] == {"conversations": 2, "questions": 5, "turns": 8}
    systems = {"memsif", "naive_rag", "bm25", "hybrid_rag", "recency", "memsif_no_segments", "memsif_no_trajectories"}
    assert set(res["systems"]) == systems
    for s in res["systems"].values():
        assert set(s) >= {"recall", "ingest_turns_per_s", "query_ms_p50", "query_ms_p95", "file_bytes_per_turn"}
        assert {b: len(d) for b, d in s["context_digests"].items()} == {b: 5 for b in ("60", "500")}
        assert set(s["recall"]) == {"60", "500"}
        for per in s["recall"].values():
            assert set(per) == {"all", "single_hop", "multi_hop", "temporal", "knowledge", "nce"}
            assert per["all"] is not None and 0.0 <= per["all"] <= 1.0
        assert s["recall"]["500"]["all"] == 1.0  # everything fits in 500 tokens
    assert "| memsif |" in r.stdout
    # the lone question of the single-turn conversation: its evidence is the only turn
    single = tmp_path / "single"
    single.mkdir()
    (single / "s.json").write_text((FIXTURES / "locomo_single.json").read_text())
    _run(str(ROOT / "benchmarks" / "locomo.py"), "--data", str(single), "--out", str(tmp_path / "s.json"),
         "--no-cache", "--budgets", "100", cwd=tmp_path)
    res = json.loads((tmp_path / "s.json").read_text())
    assert all(s["recall"]["100"]["all"] == 1.0 for s in res["systems"].values())


@pytest.mark.slow
def test_query_speed_benchmark_shape(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "tiny.json").write_text((FIXTURES / "locomo_tiny.json").read_text())
    out = tmp_path / "speed.json"
    r = _run(str(ROOT / "benchmarks" / "query_speed.py"), "--data", str(data), "--out", str(out), "--no-cache",
             "--reps", "2", "--budgets", "60,500", cwd=tmp_path)
    res = json.loads(out.read_text())
    assert res["calls"] == 4 * 2  # the fixture's four scored questions (a fifth is adversarial), two budgets
    for s in ("memsif", "hybrid_rag"):
        assert 0 < res["systems"][s]["cpu_ms_p50"] <= res["systems"][s]["cpu_ms_p95"]
    assert "memsif / hybrid_rag p50" in r.stdout


def test_offline_answers_benchmark_scores_answers_and_a_grid(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("locomo_tiny.json", "locomo_single.json"):
        (data / name).write_text((FIXTURES / name).read_text())
    out = tmp_path / "answers.json"
    r = _run(str(ROOT / "benchmarks" / "offline_answers.py"), "--data", str(data), "--out", str(out), "--no-cache",
             "--grid", "WORD_WEIGHT=0,0.1", "--grid", "MEANING_ALONE=0.8,9", cwd=tmp_path)
    res = json.loads(out.read_text())
    answerable = res["all"]["answerable"]
    assert answerable["n"] == 5 and 0.0 <= answerable["coverage"] <= 1.0 and 0.0 <= answerable["f1"] <= 1.0
    assert len(res["variants"]) == 4 and all(len(q["variants"]) == 4 for q in res["questions"])
    assert {"answer_ms_p50", "ask_ms_p50", "active_facts_ms_p50"} <= set(res)
    assert "| answerable | 5 |" in r.stdout


def test_offline_answer_figures():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from offline_answers import crossing, f1

    # the answer has 7 content words (the ISO date is three), one of them the gold one
    assert f1("Maya (2024-05-02): Yes, her name is Mochi.", "Mochi") == pytest.approx(2 * (1 / 7) / (1 + 1 / 7))
    assert f1("I don't know", "Mochi") == 0.0 and f1("anything", "the") is None
    # sentences sharing a question word hold the answer half the time; those sharing none do from 0.8 up
    points = [[0.5, True, True], [0.5, True, False]] + [[0.9 - i / 100, False, i % 2 == 0] for i in range(10)]
    points += [[0.7 - i / 100, False, False] for i in range(10)]
    assert crossing(points) == pytest.approx(0.81)
    assert crossing([[0.9, False, True]]) is None  # no sentence shares a word: nothing to match


@pytest.mark.slow
def test_locomo_benchmark_llm_accuracy_path(tmp_path, llm_server):
    """--llm runs ingestion with LLM judges, ask() and an LLM judge; here against the local server."""
    import os

    universal = json.dumps({"continues": True, "compatible": [], "facts": [], "op": "add", "target": None,
                            "title": "t", "sufficient": False, "evidence": [], "answer": "the violin",
                            "correct": True})
    llm_server.default = lambda req: universal
    data = tmp_path / "data"
    data.mkdir()
    (data / "tiny.json").write_text((FIXTURES / "locomo_tiny.json").read_text())
    out = tmp_path / "r.json"
    env = dict(os.environ, OPENAI_API_KEY="sk-test")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "locomo.py"), "--data", str(data), "--out", str(out),
                        "--no-cache", "--systems", "hybrid_rag", "--budgets", "200", "--llm", "openai/test-model",
                        "--api-base", llm_server.url], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    acc = json.loads(out.read_text())["answer_accuracy"]
    assert acc["accuracy"]["all"] == 1.0 and acc["model"] == "openai/test-model"
    assert acc["llm_calls_per_question"] >= 2 and acc["tokens_per_question"] > 0
    assert any(req["messages"][0]["content"].startswith("You grade an answer") for req in llm_server.requests)


@pytest.mark.slow
def test_merge_benchmark_runs_and_matches_the_union_ingest(tmp_path):
    out = tmp_path / "merge.json"
    _run(str(ROOT / "benchmarks" / "merge.py"), "--messages", "200", "--out", str(out), cwd=tmp_path)
    res = json.loads(out.read_text())
    assert res["report"]["added"] == 100 and res["report"]["skipped_present"] == 100
    assert res["same_segments_as_union_ingest"] is True and res["check_problems"] == []
    assert res["second_merge_added"] == 0 and res["bytes"]["merged"] > 0


def test_answer_coverage_normalises_dates_months_and_stop_words():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _coverage import coverage, words

    assert words("[2023-05-08] Caroline: on 8 May, 2023") == {"8", "5", "2023", "caroline"}
    assert words("07 Sept") == {"7", "9"}
    assert coverage("7 May 2023", words("- [2023-05-07] Mel: the week of Sun 7 May 2023")) == 1.0
    assert coverage("The week of 9 June 2023", words("Jun 9 2023")) == 0.75  # "week" missing
    assert coverage("the", words("anything")) is None  # no content word: not scored
    assert coverage("Pottery and camping", words("she likes pottery")) == 0.5


def test_splits_choose_on_development_and_report_effects(tmp_path):
    """splits.py on hand-made result files: the variant that wins on the development conversations
    is chosen, and --effects reports the held-out differences against the first file."""
    convs = ["a", "b", "c", "d", "e"]
    questions = [[c, "single_hop", i == 0] for c in convs for i in range(2)]

    def result(recall: float, flat: bool, only: str | None = None) -> dict:
        rows = [[recall if only in (None, q[0]) else 0.6] * 2 for q in questions]
        systems = {"memsif": {"per_question": {"1000": rows}}}
        if flat:
            systems["hybrid_rag"] = {"per_question": {"1000": [[0.5, 0.5] for _ in questions]}}
        return {"questions": questions, "systems": systems, "settings": {}}

    base, better = tmp_path / "base.json", tmp_path / "better.json"
    base.write_text(json.dumps(result(0.6, True)))
    better.write_text(json.dumps(result(0.7, False)))
    r = _run(str(ROOT / "benchmarks" / "splits.py"), str(base), str(better), "--effects", cwd=tmp_path)
    assert "| mean held-out | memsif | 0.700 |" in r.stdout and "| mean held-out | hybrid_rag | 0.500 |" in r.stdout
    assert "| better.json | {} | +10.0 | +10.0 | +10.0 | +0.0 | 10/10 |" in r.stdout
    # better on conversation "a" only: "a" is held out in 4 of the 10 splits (+5 points there, half of
    # the held-out questions) and on the development side of the other 6
    only_a = tmp_path / "only_a.json"
    only_a.write_text(json.dumps(result(0.7, False, only="a")))
    r = _run(str(ROOT / "benchmarks" / "splits.py"), str(base), str(only_a), "--effects", cwd=tmp_path)
    assert "| only_a.json | {} | +2.0 | +2.0 | +2.0 | +0.0 | 6/10 |" in r.stdout


@pytest.mark.slow
def test_encryption_benchmark_reports_both_files(tmp_path):
    out = tmp_path / "encryption.txt"
    r = _run(str(ROOT / "benchmarks" / "encryption.py"), "--data", str(FIXTURES / "locomo_tiny.json"),
             "--messages", "6", "--questions", "3", "--no-cache", "--out", str(out), cwd=tmp_path)
    text = out.read_text()
    assert text == r.stdout and "add_ms_p50" in text and "context_ms_p50" in text and "target:" in text
    assert not list(tmp_path.glob("*.db"))


@pytest.mark.slow
def test_known_at_benchmark_shape(tmp_path):
    out = tmp_path / "known_at.json"
    _run(str(ROOT / "benchmarks" / "known_at.py"), "--messages", "1100", "--queries", "2", "--out", str(out),
         cwd=tmp_path)
    res = json.loads(out.read_text())
    assert res["messages"] == 1100 and res["known_at_half"] == "2026-01-01T00:30:00"
    assert 0 < res["before_image_bytes_per_1000_messages"] < res["log_bytes_per_1000_messages"]
    assert {r: set(v) for r, v in res["reads"].items()} == {
        r: {"current_ms_p50", "known_at_ms_p50", "ratio"} for r in ("facts", "segments", "context")}


def test_fact_copies_counts_the_facts_a_replicated_conversation_leaves(tmp_path):
    """A conversation in which Ana names twelve things she loves, said twice: each is one fact,
    merged the second time (an older release kept a copy of each once she held ten)."""
    loves = ["jazz", "ceramics", "chess", "sailing", "poetry", "tea", "maps", "cycling", "bread", "birds", "kites",
             "rain"]
    turns = []
    for i, w in enumerate(loves):
        turns += [{"speaker": "Ana", "dia_id": f"D1:{2 * i + 1}", "text": f"I love {w}."},
                  {"speaker": "Ben", "dia_id": f"D1:{2 * i + 2}", "text": "Nice."}]
    conversation = {"speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
                    "session_1": turns, "session_2_date_time": "10:05 am on 2 June, 2023",
                    "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "Long time no see."}]}
    data = tmp_path / "data"
    data.mkdir()
    (data / "loves.json").write_text(json.dumps({"sample_id": "loves", "conversation": conversation, "qa": []}))
    out = tmp_path / "facts.json"
    _run(str(ROOT / "benchmarks" / "fact_copies.py"), "--locomo", str(data), "--copies", "2", "--out", str(out),
         cwd=tmp_path)
    res = json.loads(out.read_text())
    assert res["data"] == "locomo" and res["copies"] == 2 and res["machine"]
    assert res["current_facts"] == res["distinct_statements"] == len(loves) and res["op_merge"] >= len(loves)


def test_chat_typing_finds_the_facts_of_a_conversation_however_it_is_typed(tmp_path):
    """A LoCoMo-format conversation whose facts are said with straight apostrophes: retyped as a
    phone (’) and as chat ("im", "i"), every statement is still found and none is new."""
    turns = [{"speaker": "Ana", "dia_id": "D1:1", "text": "I'm allergic to peanuts."},
             {"speaker": "Ben", "dia_id": "D1:2", "text": "I don't eat pork."},
             {"speaker": "Ana", "dia_id": "D1:3", "text": "I live in Porto, I love jazz."},
             {"speaker": "Ben", "dia_id": "D1:4", "text": "I'm vegetarian now."}]
    conversation = {"speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
                    "session_1": turns}
    data = tmp_path / "data"
    data.mkdir()
    (data / "typed.json").write_text(json.dumps({"sample_id": "typed", "conversation": conversation, "qa": []}))
    out = tmp_path / "typing.json"
    _run(str(ROOT / "benchmarks" / "chat_typing.py"), "--locomo", str(data), "--out", str(out), cwd=tmp_path)
    res = json.loads(out.read_text())["locomo"]
    assert res["statements_as_written"] == 5 and res["messages"] == 4
    for form in ("phone", "chat"):
        assert res[form] == {"statements": 5, "kept": 1.0, "new": 0}


def test_trajectory_entities_benchmark_times_links_as_the_vocabulary_grows(tmp_path):
    r = _run(str(ROOT / "benchmarks" / "trajectory_entities.py"), "--links", "200", cwd=tmp_path)
    rows = [line for line in r.stdout.splitlines() if "entities met" in line]
    assert len(rows) == 2 and rows[-1].split()[0] == str(200 * 10 + 11)
    assert all(float(line.split()[3]) > 0 for line in rows)
