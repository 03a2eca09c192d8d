"""Event Trajectories in the context (issue 26, item 3): for a question about change, the other
episodes of the top message's thread follow it in the evidence ranking."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakes import FakeEmbedder
from memsif_lite import Config, Memory, trajectories
from memsif_lite.pipelines import reopen

T0 = datetime(2024, 3, 1, 18, 0)
CFG = Config(sem_low=0.0, sem_high=1.0, tau_merge=0.3, tau_split=0.1, trajectory_threshold=0.3)


@pytest.mark.parametrize("question", ["Does Ana still play tennis?", "What does Ana do now instead of tennis?",
                                      "What sport did Ana use to play?", "Since when does Ana swim?",
                                      "Is Ana no longer at the club?", "How did Ana's hobby change?",
                                      "Where did Ana live before Porto?", "What is Ana currently reading?"])
def test_change_questions_are_recognised(question):
    assert trajectories.is_change_question(question)


@pytest.mark.parametrize("question", ["What sport does Ana play?", "When did Ana adopt her dog?",
                                      "Who is Ana's brother?", "What did Ana eat at the snowy lodge?"])
def test_other_questions_are_not(question):
    assert not trajectories.is_change_question(question)


def _thread_file(tmp_path):
    """Sessions weeks apart: Ana's tennis thread twice (one trajectory, two segments), Ben's
    goldfish between and after (another trajectory)."""
    path = tmp_path / "t.db"
    said = [("1", 0, "Ana", "Ana plays tennis at the club with her racket every Sunday"),
            ("1", 0, "Ana", "Ana plays tennis at the club with her coach every Sunday"),
            ("2", 20, "Ben", "Ben feeds his goldfish Bubbles flakes every morning"),
            ("2", 20, "Ben", "Ben cleans the goldfish tank for Bubbles every week"),
            ("3", 40, "Ana", "Ana quit tennis at the club, her racket is sold, Sunday is swimming now"),
            ("3", 40, "Ana", "Ana swims at the club pool every Sunday instead of tennis"),
            ("4", 60, "Ben", "Ben bought a bigger tank for the goldfish Bubbles")]  # closes session 3
    with Memory(path, embedder=FakeEmbedder(), config=CFG) as mem:
        ids = mem.add_many([{"speaker": s, "text": t, "session": sess, "at": T0 + timedelta(days=d, seconds=10 * i)}
                            for i, (sess, d, s, t) in enumerate(said)])
        mem.process()
        segs = {m: s for s in mem.segments() for m in s.message_ids}
    return path, ids, segs


def test_a_change_question_brings_the_other_episode_of_the_thread_next(tmp_path):
    path, ids, segs = _thread_file(tmp_path)
    assert segs[ids[0]].trajectory_id is not None
    assert segs[ids[0]].trajectory_id == segs[ids[4]].trajectory_id != segs[ids[2]].trajectory_id
    assert segs[ids[0]].id != segs[ids[4]].id
    ranked = [ids[0], ids[1], ids[2], ids[3], ids[5], ids[4]]
    db = reopen(path, CFG, FakeEmbedder(), read_only=True)
    try:
        # the later episode's best-ranked message moves right after the top one; nothing else moves
        assert trajectories.along_thread(db, "Does Ana still play tennis?", ranked) == \
            [ids[0], ids[5], ids[1], ids[2], ids[3], ids[4]]
        assert trajectories.along_thread(db, "Does Ana play tennis?", ranked) == ranked
        assert trajectories.along_thread(db, "Does Ana still play tennis?", ranked, episodes=0) == ranked
        # a top message of a thread with one episode changes nothing
        goldfish_first = [ids[2], ids[0], ids[3], ids[4]]
        assert trajectories.along_thread(db, "Does Ben still feed Bubbles?", goldfish_first) == goldfish_first
    finally:
        db.close()


def test_the_context_of_a_change_question_holds_both_episodes(tmp_path):
    path, ids, segs = _thread_file(tmp_path)
    with Memory(path, embedder=FakeEmbedder(), config=CFG, read_only=True) as mem:
        got = set(mem.context("Does Ana still play tennis at the club with her racket?", budget_tokens=200).message_ids)
    assert ids[0] in got and ({ids[4], ids[5]} & got)


@pytest.fixture(scope="module")
def thread_db(tmp_path_factory):
    path, ids, _ = _thread_file(tmp_path_factory.mktemp("thread"))
    db = reopen(path, CFG, FakeEmbedder(), read_only=True)
    yield db, ids
    db.close()


@given(order=st.permutations(list(range(7))), question=st.sampled_from(
    ["Does Ana still play tennis?", "Does Ben still have Bubbles?", "What sport?"]), cut=st.integers(0, 7))
def test_the_thread_only_moves_messages_of_the_top_thread_forward(thread_db, order, question, cut):
    db, ids = thread_db
    ranked = [ids[i] for i in order][:cut]
    got = trajectories.along_thread(db, question, ranked)
    assert sorted(got) == sorted(ranked) and got[:1] == ranked[:1]
    moved = [m for m in got if got.index(m) < ranked.index(m)]
    placed = db.structure.placements(ranked)
    assert all(placed[m][1] == placed[ranked[0]][1] for m in moved)
    assert len({placed[m][0] for m in moved}) == len(moved) <= trajectories.THREAD_EPISODES
