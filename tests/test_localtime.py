"""Local time: each message keeps the UTC offset its caller gave, and relative expressions
("yesterday", "last Saturday", "this/next/last weekend") resolve on the speaker's LOCAL date."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fakes import raw

from memsif_lite.timeutil import local_time, plain_time_words, relative_notes, stated_times, to_stored, utc_offset_min


def _notes(text: str, at: str) -> list[str]:
    return relative_notes(text, local_time(datetime.fromisoformat(to_stored(at)), utc_offset_min(at)))


@pytest.mark.parametrize("at, text, expected", [
    # 00:30 on Monday in Paris is still Sunday 22:30 UTC: "yesterday" is Sunday 5 May, not Saturday 4 May
    ("2024-05-06T00:30:00+02:00", "I went yesterday", '"yesterday" = Sun 5 May 2024'),
    ("2024-05-06T00:30:00+02:00", "see you tomorrow", '"tomorrow" = Tue 7 May 2024'),
    ("2024-05-05T23:30:00-07:00", "today was long", '"today" = Sun 5 May 2024'),  # Mon 06:30 UTC
    ("2024-05-06T00:30:00+02:00", "last Saturday", '"last Saturday" = Sat 4 May 2024'),
    # weekends are Sat–Sun
    ("2024-05-06T10:00:00", "next weekend we hike", '"next weekend" = Sat 11 May 2024 – Sun 12 May 2024'),
    ("2024-05-06T10:00:00", "this weekend", '"this weekend" = Sat 11 May 2024 – Sun 12 May 2024'),
    ("2024-05-11T10:00:00", "this weekend", '"this weekend" = Sat 11 May 2024 – Sun 12 May 2024'),
    ("2024-05-12T10:00:00", "this weekend", '"this weekend" = Sat 11 May 2024 – Sun 12 May 2024'),
    ("2024-05-10T10:00:00", "next weekend", '"next weekend" = Sat 18 May 2024 – Sun 19 May 2024'),
    ("2024-05-06T10:00:00", "last weekend", '"last weekend" = Sat 4 May 2024 – Sun 5 May 2024'),
    ("2024-05-12T10:00:00", "last weekend", '"last weekend" = Sat 4 May 2024 – Sun 5 May 2024'),
    # the weekend on the local date: Sunday 23:30 in New York is Monday in UTC
    ("2024-05-12T23:30:00-04:00", "this weekend", '"this weekend" = Sat 11 May 2024 – Sun 12 May 2024'),
])
def test_relative_expressions_resolve_on_the_local_date(at, text, expected):
    assert _notes(text, at) == [expected]


@pytest.mark.parametrize("text, expected", [
    # chat spells time words its own way: each is read as the word it stands for (said Mon 6 May 2024)
    ("see u tmrw", '"tmrw" = Tue 7 May 2024'), ("c u tmr!", '"tmr" = Tue 7 May 2024'),
    ("see you tomorow", '"tomorow" = Tue 7 May 2024'), ("saw her yday", '"yday" = Sun 5 May 2024'),
    ("party tonite", '"tonite" = Mon 6 May 2024'), ("last wk was crazy", '"last wk" = the week of Mon 29 Apr 2024'),
    ("next wknd?", '"next wknd" = Sat 11 May 2024 – Sun 12 May 2024'),
    ("dentist next tues at 3", '"next tues" = Tue 7 May 2024'), ("last thurs", '"last thurs" = Thu 2 May 2024'),
    ("next fri", '"next fri" = Fri 10 May 2024'), ("2 wks ago", '"2 wks ago" ≈ Mon 22 Apr 2024'),
    ("couple days ago", '"couple days ago" ≈ Sat 4 May 2024'), ("last yr", '"last yr" = 2023'),
])
def test_chat_spellings_of_time_words_resolve_too(text, expected):
    assert _notes(text, "2024-05-06T10:00:00") == [expected]


@pytest.mark.parametrize("text", ["is this yr car?", "I sat in the sun last sat", "next sat", "last wed", "this sun",
                                  "this yr", "hi mon", "we wed in June", "fri-day", "I moved laſt week",
                                  "thıs Friday", "tonıte"])
def test_words_that_only_look_like_chat_time_words_name_no_day(text):
    assert _notes(text, "2024-05-06T10:00:00") == []


def test_utc_offsets():
    assert utc_offset_min("2024-05-06T00:30:00+02:00") == 120
    assert utc_offset_min("2024-05-06T00:30:00Z") == 0
    assert utc_offset_min("2024-05-06T00:30:00-03:30") == -210
    assert utc_offset_min("2024-05-06T00:30:00") is None
    assert utc_offset_min(datetime(2024, 5, 6, tzinfo=timezone(timedelta(hours=9)))) == 540


def test_a_message_keeps_its_offset_and_evidence_uses_the_local_date(memory, db):
    mem = memory()
    mid = mem.add("Ana", "I went to the violin recital yesterday.", at="2024-05-06T00:30:00+02:00")
    naive = mem.add("Bo", "I played the violin yesterday.", at="2024-05-06T00:30:00")
    m = mem.get(mid)
    assert m.at == datetime(2024, 5, 5, 22, 30) and m.utc_offset_min == 120
    assert m.local_at == datetime(2024, 5, 6, 0, 30, tzinfo=timezone(timedelta(hours=2)))
    assert mem.get(naive).utc_offset_min is None and mem.get(naive).local_at.utcoffset() == timedelta(0)
    with raw(db) as con:
        assert con.execute("SELECT utc_offset_min FROM messages ORDER BY id").fetchall() == [(120,), (None,)]
    ev = {e.speaker: e for e in mem.context("violin recital", budget_tokens=500).evidence}
    assert ev["Ana"].notes == ('"yesterday" = Sun 5 May 2024',)
    assert ev["Ana"].local_at == datetime(2024, 5, 6, 0, 30)
    assert ev["Bo"].notes == ('"yesterday" = Sun 5 May 2024',)
    assert "[2024-05-06]\n- Ana:" in mem.context("violin recital", budget_tokens=500).text


def test_offsets_survive_export_and_import(memory, tmp_path):
    mem = memory()
    mem.add("Ana", "hello from Tokyo", at="2024-05-06T09:00:00+09:00")
    mem.export_to(tmp_path / "x.jsonl")
    other = memory(path=tmp_path / "other.db")
    other.import_from(tmp_path / "x.jsonl")
    assert other.messages()[0].utc_offset_min == 540


@pytest.mark.parametrize("text, plain", [
    ("i quit 2 wks ago", "i quit 2 weeks ago"), ("see u tmrw!", "see u tomorrow!"),
    ("last nite was fun", "last night was fun"), ("Last Fri I left", "Last friday I left"),
    ("next wknd?", "next weekend?"), ("I left last Friday", "I left last Friday"), ("is this yr car", "is this yr car"),
    ("I sat on the sun", "I sat on the sun")])
def test_time_phrases_spelled_as_chat_are_written_out_and_nothing_else(text, plain):
    assert plain_time_words(text) == plain
    assert plain_time_words(plain) == plain


def test_a_look_alike_letter_beside_a_real_time_word_is_no_second_date():
    """Unicode case folding makes "laſt" and "yeſterday" equal "last" and "yesterday" to a
    case-insensitive pattern: read as ASCII they name no day, and beside a real one they neither
    add a date nor break the reading (they raised KeyError / IndexError before)."""
    said = datetime(2024, 7, 10, 9)
    assert relative_notes("laſt week, then last week", said) == ['"last week" = the week of Mon 1 Jul 2024']
    assert [t[2].date() for t in stated_times("yeſterday and yesterday", said)] == [said.date() - timedelta(days=1)]
