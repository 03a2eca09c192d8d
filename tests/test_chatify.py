"""benchmarks/chatify.py: the chat-style variant of a LoCoMo conversation keeps every turn's text,
in order, and every question with its evidence remapped to the new message ids."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import conversation_files  # noqa: E402
from chatify import chatify_sample, sentences  # noqa: E402

SESSION = re.compile(r"^session_(\d+)$")


def _tiny() -> tuple[str, dict]:
    return conversation_files(FIXTURES / "locomo_tiny.json")[0]


def _messages(chat: dict) -> dict[str, dict]:
    return {t["dia_id"]: t for k, v in chat.items() if SESSION.match(k) for t in v}


def test_same_seed_same_conversation_other_seeds_differ():
    sid, sample = _tiny()
    a, _ = chatify_sample(sample, 7, sid)
    b, _ = chatify_sample(sample, 7, sid)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    others = {json.dumps(chatify_sample(sample, s, sid)[0], sort_keys=True) for s in range(1, 6)}
    assert len(others - {json.dumps(a, sort_keys=True)}) >= 1


def test_every_turn_text_is_in_its_pieces_in_order():
    """Without the casual noise (scale 0), a turn's pieces joined are its text; a photo is its own piece."""
    sid, sample = _tiny()
    for seed in range(5):
        chat, id_map = chatify_sample(sample, seed, sid, casual_scale=0.0)
        msgs = _messages(chat)
        order = list(msgs)
        for key, turns in sample["conversation"].items():
            if not SESSION.match(key):
                continue
            for t in turns:
                pieces = [msgs[d] for d in id_map[t["dia_id"]]]
                assert [order.index(d) for d in id_map[t["dia_id"]]] == sorted(order.index(d)
                                                                                for d in id_map[t["dia_id"]])
                assert all(p["speaker"] == t["speaker"] for p in pieces)
                assert " ".join(p["text"] for p in pieces if p["text"]).split() == t["text"].split()
                assert sum("blip_caption" in p for p in pieces) == ("blip_caption" in t)


def test_times_increase_within_a_session():
    sid, sample = _tiny()
    chat, _ = chatify_sample(sample, 3, sid)
    for key, msgs in chat.items():
        if SESSION.match(key):
            offsets = [m["offset_s"] for m in msgs]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
            assert [m["dia_id"] for m in msgs] == [f"D{SESSION.match(key).group(1)}:{i}"  # type: ignore[union-attr]
                                                  for i in range(1, len(msgs) + 1)]


def test_no_question_lost_and_evidence_names_existing_pieces():
    sid, sample = _tiny()
    for seed in range(5):
        chat, id_map = chatify_sample(sample, seed, sid)
        msgs = _messages(chat)
        assert len(chat["qa"]) == len(sample["qa"])
        for old, new in zip(sample["qa"], chat["qa"], strict=True):
            assert new["question"] == old["question"] and new["category"] == old["category"]
            assert new["evidence_turns"] == [id_map[e] for e in old["evidence"]]
            assert new["evidence"] == [p for g in new["evidence_turns"] for p in g]
            assert all(p in msgs for p in new["evidence"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="abcde ,.!?", min_size=1, max_size=30), min_size=1, max_size=6), st.integers(0, 99))
def test_sentences_keep_every_word_in_order(parts, seed):
    import random

    text = " ".join(parts)
    pieces = sentences(text, random.Random(seed))
    assert all(p == p.strip() and p for p in pieces)
    assert " ".join(pieces).split() == text.split()


def test_benchmark_scores_split_turns_any_piece_and_all_pieces():
    from locomo import turn_recall

    groups = [["D1:1", "D1:2"], ["D1:5"], ["D9:9"]]  # D9:9 names no message: dropped, as locomo.py drops it
    known = {"D1:1", "D1:2", "D1:5"}
    assert turn_recall(groups, known, {"D1:1"}) == (0.5, 0.0)
    assert turn_recall(groups, known, {"D1:1", "D1:2"}) == (0.5, 0.5)
    assert turn_recall(groups, known, known) == (1.0, 1.0)


def test_benchmark_reads_per_message_offsets():
    from datetime import datetime

    from locomo import with_offsets

    from memsif_lite.importers import locomo_turns

    sid, sample = _tiny()
    chat, _ = chatify_sample(sample, 0, sid)
    turns = with_offsets(chat, list(locomo_turns(chat)))
    by_id = {t["source_id"]: t["at"] for t in turns}
    for key, msgs in chat.items():
        if SESSION.match(key):
            start = datetime.strptime(chat[f"{key}_date_time"], "%I:%M %p on %d %B, %Y")
            assert [(by_id[m["dia_id"]] - start).total_seconds() for m in msgs] == [m["offset_s"] for m in msgs]
    plain = list(locomo_turns(sample["conversation"]))  # LoCoMo itself has no offsets: left as imported
    assert with_offsets(sample["conversation"], [dict(t) for t in plain]) == plain


@pytest.mark.slow
def test_benchmark_runs_on_a_chat_style_file(tmp_path):
    """locomo.py on a chatify output: turn-level recall (any piece ≥ all pieces) and the structure table."""
    sid, sample = _tiny()
    chat, _ = chatify_sample(sample, 0, sid)
    data = tmp_path / "data"
    data.mkdir()
    (data / "tiny.json").write_text(json.dumps(chat))
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "locomo.py"), "--data", str(data), "--out", str(out),
                        "--no-cache", "--systems", "memsif,hybrid_rag", "--budgets", "60,1000", "--structure"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    for s in res["systems"].values():
        tr = s["turn_recall"]
        for b in ("60", "1000"):
            assert tr["any_piece"][b]["all"] >= tr["all_pieces"][b]["all"]
        assert tr["all_pieces"]["1000"]["all"] == 1.0  # the whole tiny chat fits in 1000 tokens
    st_ = res["structure"]["locomo_tiny-chat"]
    assert st_["messages"] == sum(len(v) for k, v in chat.items() if SESSION.match(k))
    assert st_["segments"] >= 1 and st_["trajectories"] >= 1
    assert "any piece / all pieces" in r.stdout and "interaction structure" in r.stdout
