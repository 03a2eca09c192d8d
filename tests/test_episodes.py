"""Topical Segments as episodes (issue 26): a session change or a long gap ends a segment whatever φ
says; the rest of a burst joins the open segment; evidence brings the rest of a top message's burst."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder, raw
from memsif_lite import Config, Memory, episodes
from memsif_lite.errors import ConfigError

T0 = datetime(2024, 3, 1, 18, 0)
SAME = "Ana baked sourdough bread with rye flour"  # repeated: φ merges it with itself


def _mem(tmp_path, **knobs) -> Memory:
    cfg = Config(sem_low=0.0, sem_high=1.0, **knobs)
    return Memory(tmp_path / "m.db", embedder=FakeEmbedder(), config=cfg)


def _segments(mem: Memory) -> list[tuple[int, ...]]:
    return [s.message_ids for s in mem.segments()]


def _decisions(mem: Memory, path) -> list[str]:
    mem.close()
    with raw(path) as con:
        return [r[0] for r in con.execute("SELECT decision FROM message_units ORDER BY message_id")]


def test_a_gap_ends_a_segment_whatever_phi_says(tmp_path):
    mem = _mem(tmp_path, segment_gap_s=3600)
    ids = mem.add_many([{"speaker": "Ana", "text": SAME, "at": T0},
                        {"speaker": "Ana", "text": SAME, "at": T0 + timedelta(minutes=50)},
                        {"speaker": "Ana", "text": SAME, "at": T0 + timedelta(minutes=50 + 61)}])
    assert _segments(mem) == [tuple(ids[:2]), (ids[2],)]
    assert _decisions(mem, tmp_path / "m.db") == ["first", "merge", episodes.END]


def test_the_gap_limit_is_a_knob(tmp_path):
    mem = _mem(tmp_path, segment_gap_s=3 * 3600)
    ids = mem.add_many([{"speaker": "Ana", "text": SAME, "at": T0 + timedelta(hours=h)} for h in (0, 2, 6)])
    assert _segments(mem) == [tuple(ids[:2]), (ids[2],)]
    mem.close()


def test_a_session_change_ends_a_segment(tmp_path):
    mem = _mem(tmp_path)
    ids = mem.add_many([{"speaker": "Ana", "text": SAME, "at": T0, "session": "1"},
                        {"speaker": "Ana", "text": SAME, "at": T0 + timedelta(minutes=1), "session": "1"},
                        {"speaker": "Ana", "text": SAME, "at": T0 + timedelta(minutes=2), "session": "2"}])
    assert _segments(mem) == [tuple(ids[:2]), (ids[2],)]
    mem.close()


def test_a_message_older_than_the_open_segment_is_judged_by_its_distance_and_never_attached(tmp_path):
    """A cold review: an import newest first made one 'attach' segment of twelve days (the gap was
    negative, so never over the limit and always within a burst)."""
    mem = _mem(tmp_path)
    ids = mem.add_many([{"speaker": "Ana", "text": SAME, "at": T0 - timedelta(days=d)} for d in range(12)])
    assert _segments(mem) == [(i,) for i in ids]
    assert _decisions(mem, tmp_path / "m.db") == ["first"] + [episodes.END] * 11


def test_old_messages_on_the_same_topic_start_a_new_episode(tmp_path):
    """The issue's case: a similar message months later does not join the open segment."""
    mem = _mem(tmp_path)
    ids = mem.add_many([{"speaker": "Ana", "text": SAME, "at": T0},
                        {"speaker": "Ana", "text": SAME + " again", "at": T0 + timedelta(days=75)}])
    assert _segments(mem) == [(ids[0],), (ids[1],)]
    mem.close()


def test_the_rest_of_a_burst_joins_its_segment(tmp_path):
    """Same speaker seconds later joins even on another subject; a minute later φ decides."""
    mem = _mem(tmp_path, burst_s=30)
    ids = mem.add_many([{"speaker": "Ana", "text": "my beagle Rex turned three", "at": T0},
                        {"speaker": "Ana", "text": "violin lessons start tuesday downtown",
                         "at": T0 + timedelta(seconds=8)},
                        {"speaker": "Ana", "text": "pasta marathon kitten ceramics", "at": T0 + timedelta(seconds=98)}])
    assert _segments(mem) == [tuple(ids[:2]), (ids[2],)]
    assert _decisions(mem, tmp_path / "m.db")[1] == episodes.ATTACH


@pytest.mark.parametrize("burst_s,second", [(0, ("Ana", "violin lessons start tuesday downtown")),
                                             (30, ("Ben", "violin lessons start tuesday downtown"))])
def test_without_a_burst_phi_decides(tmp_path, burst_s, second):
    """No burst rule, or another speaker: φ splits the unrelated message."""
    mem = _mem(tmp_path, burst_s=burst_s)
    mem.add_many([{"speaker": "Ana", "text": "my beagle Rex turned three", "at": T0},
                  {"speaker": second[0], "text": second[1], "at": T0 + timedelta(seconds=5)}])
    assert len(_segments(mem)) == 2
    assert _decisions(mem, tmp_path / "m.db") == ["first", "split"]


@pytest.mark.parametrize("reaction", ["omg 😂", "lol", "omg yes", "👍", "haha nice!!"])
def test_a_reaction_joins_its_episode(tmp_path, reaction):
    """Another speaker's short reaction minutes later (no burst) joins the episode it answers, where
    φ would split it; the next real message is judged by φ as before."""
    mem = _mem(tmp_path, burst_s=30)
    ids = mem.add_many([{"speaker": "Ana", "text": "my beagle Rex turned three", "at": T0},
                        {"speaker": "Ben", "text": reaction, "at": T0 + timedelta(minutes=2)},
                        {"speaker": "Ben", "text": "violin lessons start tuesday downtown",
                         "at": T0 + timedelta(minutes=4)}])
    assert _segments(mem) == [tuple(ids[:2]), (ids[2],)]
    assert _decisions(mem, tmp_path / "m.db") == ["first", episodes.ATTACH, "split"]


@pytest.mark.parametrize("text", ["my beagle is 3", "Rex!", "see you at the vet", "violin tuesday"])
def test_a_message_with_a_number_or_a_content_word_is_no_reaction(text):
    assert not episodes.is_reaction(text)


def test_a_reaction_after_a_session_change_or_a_gap_still_starts_a_new_episode(tmp_path):
    mem = _mem(tmp_path, burst_s=30)
    ids = mem.add_many([{"speaker": "Ana", "text": "my beagle Rex turned three", "at": T0, "session": "1"},
                        {"speaker": "Ben", "text": "lol", "at": T0 + timedelta(minutes=1), "session": "2"},
                        {"speaker": "Ana", "text": "ok", "at": T0 + timedelta(hours=3), "session": "2"}])
    assert _segments(mem) == [(ids[0],), (ids[1],), (ids[2],)]


@pytest.mark.parametrize("knobs", [{"segment_gap_s": 0}, {"segment_gap_s": -5}, {"segment_gap_s": float("nan")},
                                   {"segment_gap_s": float("inf")}, {"segment_gap_s": True}, {"burst_s": -1},
                                   {"burst_s": "30"}, {"segment_gap_s": 20, "burst_s": 30}, {"burst_s": 7200}])
def test_bad_episode_knobs_are_refused(knobs):
    with pytest.raises(ConfigError):
        Config(**knobs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["Ana", "Ben"]), st.sampled_from(["lol", SAME, "violin exam", "pasta"]),
                          st.integers(0, 7200), st.sampled_from(["1", "2"])), min_size=1, max_size=12))
def test_no_segment_spans_a_session_change_or_a_long_gap(tmp_path_factory, spec):
    path = tmp_path_factory.mktemp("ep") / "m.db"
    items, t = [], T0
    for speaker, text, gap, session in spec:
        t += timedelta(seconds=gap)
        items.append({"speaker": speaker, "text": text, "at": t, "session": session})
    with Memory(path, embedder=FakeEmbedder(), config=Config(sem_low=0.0, sem_high=1.0, segment_gap_s=3600)) as mem:
        ids = mem.add_many(items)
        at = dict(zip(ids, items, strict=True))
        segs = _segments(mem)
    assert sorted(m for s in segs for m in s) == ids
    for s in segs:
        for a, b in zip(s, s[1:], strict=False):
            assert at[a]["session"] == at[b]["session"]
            assert (at[b]["at"] - at[a]["at"]).total_seconds() <= 3600


QUESTION = "Which beagle did Ana adopt?"


def _burst_memory(tmp_path) -> tuple[Memory, list[int]]:
    mem = _mem(tmp_path, burst_s=30)
    items = [{"speaker": "Ben", "text": f"Ben adopted a goldfish named Bubbles number {i}",
              "at": T0 + timedelta(minutes=i)} for i in range(30)]
    items += [{"speaker": "Ana", "text": "Ana adopted a beagle", "at": T0 + timedelta(minutes=40)},
              {"speaker": "Ana", "text": "his name is Rex", "at": T0 + timedelta(minutes=40, seconds=6)}]
    return mem, mem.add_many(items)


def test_a_top_message_brings_its_neighbour_in_the_segment(tmp_path, monkeypatch):
    mem, ids = _burst_memory(tmp_path)
    monkeypatch.setattr(episodes, "NEIGHBOURS_OF_TOP", 3)
    ctx = mem.context(QUESTION, budget_tokens=60)
    assert {ids[-2], ids[-1]} <= set(ctx.message_ids)
    monkeypatch.setattr(episodes, "NEIGHBOUR_TOKENS", 2)  # "his name is Rex" is over the allowance
    assert ids[-1] not in mem.context(QUESTION, budget_tokens=60).message_ids
    mem.close()


def test_without_neighbours_the_rest_of_the_burst_is_crowded_out(tmp_path, monkeypatch):
    mem, ids = _burst_memory(tmp_path)
    monkeypatch.setattr(episodes, "NEIGHBOURS_OF_TOP", 0)
    ctx = mem.context(QUESTION, budget_tokens=60)
    assert ids[-2] in ctx.message_ids and ids[-1] not in ctx.message_ids
    mem.close()


def test_the_other_speakers_neighbour_does_not_come(tmp_path):
    mem = _mem(tmp_path, burst_s=30, tau_merge=0.01, tau_split=0.0)  # one segment: only the speaker differs
    items = [{"speaker": "Ben", "text": f"Ben adopted a goldfish named Bubbles number {i}",
              "at": T0 + timedelta(minutes=i)} for i in range(30)]
    items += [{"speaker": "Ana", "text": "Ana adopted a beagle", "at": T0 + timedelta(minutes=40)},
              {"speaker": "Ben", "text": "his name is Rex", "at": T0 + timedelta(minutes=40, seconds=6)}]
    ids = mem.add_many(items)
    assert _segments(mem) == [tuple(ids)]
    ctx = mem.context(QUESTION, budget_tokens=60)
    assert ids[-2] in ctx.message_ids and ids[-1] not in ctx.message_ids
    mem.close()
