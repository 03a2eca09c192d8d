"""The offline CoreFact extractor under the typing of phones and chat apps.

    python benchmarks/chat_typing.py --locomo ../shared/data/locomo --memorybank ../shared/data/memorybank

Real messaging-app chats are typed on phones, whose keyboards write the curly apostrophe (’: "I’m",
"don’t"), and casually ("im", "dont", "i live in…"). None of the development data is typed that
way (LoCoMo and MemoryBank use the straight ' only), so this takes each message as written and
retypes it two ways, deterministically:

* ``phone``: every ' as ’ (what iOS and Android keyboards type by default);
* ``chat``: the contractions of "I" and of "not" without their apostrophe ("im", "ive", "dont",
  "cant", "didnt"…), "I" as a word in lowercase, and time words as chat spells them ("yday",
  "tmrw", "tonite", "2 wks ago", "last wk", "next wknd") — only those, so that what the extractor
  could find stays the same. These are the forms ``fact_extraction.typed_plainly`` reads back:
  what the tree before found in them is the measure; that the tree after finds everything is
  what it was built for (a check, not a discovery). Chat's other ways (a capital "Dont" opening
  a message, no punctuation, typos, lowercase names) are not retyped here: ``chatify.py`` and
  ``locomo.py`` measure their cost on recall.

For each form it runs the offline extractor (``extract_offline``, per conversation: every message
of a speaker's conversation at once) and compares the statements (subject and statement with its
date, lowercase) with those of the messages as written: ``kept`` is the share of those still found,
``new`` the statements found only in the retyped form (a rule that now fires on text the original
did not have, or the same fact dated otherwise: each is printed). ``--out F`` writes the counts as
JSON with the date and machine. ``--time``: also the CPU time ``extract_offline`` takes a message
as written (best of five passes over all of them; run the script of another tree to compare).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import conversation_files, machine  # noqa: E402

from memsif_lite.config import DEFAULT_FACT_SCHEMA  # noqa: E402
from memsif_lite.db.rows import MessageRow  # noqa: E402
from memsif_lite.fact_extraction import extract_offline  # noqa: E402
from memsif_lite.importers import locomo_turns  # noqa: E402

_CHAT = {"i'm": "im", "i've": "ive", "don't": "dont", "can't": "cant", "didn't": "didnt", "doesn't": "doesnt",
         "isn't": "isnt", "wasn't": "wasnt", "aren't": "arent", "weren't": "werent", "haven't": "havent",
         "hasn't": "hasnt", "won't": "wont"}
_CHAT_WORD = re.compile(r"(?<![\w'])(" + "|".join(re.escape(k) for k in _CHAT) + r")(?![\w'])", re.I)
_I = re.compile(r"(?<![\w'])I(?=['\s,;:!?)]|$)")
_TIME = {"yesterday": "yday", "tomorrow": "tmrw", "tonight": "tonite", "weeks ago": "wks ago", "years ago": "yrs ago",
         "last week": "last wk", "next week": "next wk", "next weekend": "next wknd", "last weekend": "last wknd"}
_TIME_WORD = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(_TIME, key=len, reverse=True)) + r")\b", re.I)


def phone(text: str) -> str:
    return text.replace("'", "\u2019")


def chat(text: str) -> str:
    text = _TIME_WORD.sub(lambda m: _TIME[m.group(1).lower()], text)
    return _I.sub("i", _CHAT_WORD.sub(lambda m: _CHAT[m.group(1).lower()], text))


def _key(subject: str, stmt: str) -> str:
    return subject.lower() + "|" + stmt.strip().lower()


def _statements(conversations: list[list[MessageRow]]) -> set[str]:
    return {_key(c.subject, c.stmt) for rows in conversations for c in extract_offline(rows, DEFAULT_FACT_SCHEMA)}


def locomo(folder: str) -> list[list[MessageRow]]:
    out = []
    for _, sample in conversation_files(folder):
        rows = [MessageRow(i + 1, t["speaker"], t["text"], "2023-05-08T13:56:00", "1", None)
                for i, t in enumerate(locomo_turns(sample["conversation"])) if t.get("text")]
        out.append(rows)
    return out


def memorybank(folder: str) -> list[list[MessageRow]]:
    users = json.loads((Path(folder) / "memory_bank_en.json").read_text(encoding="utf-8"))
    out = []
    for name, user in users.items():
        rows: list[MessageRow] = []
        for day, exchanges in sorted(user["history"].items()):
            for e in exchanges:
                rows.append(MessageRow(len(rows) + 1, name, e["query"], f"{day}T20:00:00", day, None))
                rows.append(MessageRow(len(rows) + 1, "AI companion", e["response"], f"{day}T20:01:00", day, None))
        out.append(rows)
    return out


def _cpu_us_a_message(conversations: list[list[MessageRow]]) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        _statements(conversations)
        best = min(best, time.process_time() - t)
    return round(1e6 * best / max(1, sum(len(c) for c in conversations)), 1)


def compare(name: str, conversations: list[list[MessageRow]], timed: bool = False) -> dict:
    written = _statements(conversations)
    doc: dict = {"messages": sum(len(c) for c in conversations), "statements_as_written": len(written)}
    if timed:
        doc["extract_cpu_us_a_message"] = _cpu_us_a_message(conversations)
        print(f"{name}: extract_offline {doc['extract_cpu_us_a_message']} µs CPU a message as written")
    for form, retype in (("phone", phone), ("chat", chat)):
        got = _statements([[MessageRow(r.id, r.speaker, retype(r.text), r.at, r.session, r.source_id) for r in rows]
                           for rows in conversations])
        new = sorted(got - written)
        doc[form] = {"statements": len(got), "kept": round(len(got & written) / max(1, len(written)), 3),
                     "new": len(new)}
        print(f"{name} {form}: {len(got)} statements, {len(got & written)} of {len(written)} as written kept "
              f"({doc[form]['kept']}), {len(new)} new")
        for s in new:
            print(f"    new: {s}")
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", metavar="DIR", help="a LoCoMo folder")
    ap.add_argument("--memorybank", metavar="DIR", help="the MemoryBank folder (memory_bank_en.json)")
    ap.add_argument("--out", help="write the counts as JSON here too")
    ap.add_argument("--time", action="store_true", help="also time extract_offline on the messages as written")
    args = ap.parse_args()
    if not (args.locomo or args.memorybank):
        ap.error("give --locomo, --memorybank or both")
    doc: dict = {"date": time.strftime("%Y-%m-%d"), "machine": machine()}
    if args.locomo:
        doc["locomo"] = compare("locomo", locomo(args.locomo), args.time)
    if args.memorybank:
        doc["memorybank"] = compare("memorybank", memorybank(args.memorybank), args.time)
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
