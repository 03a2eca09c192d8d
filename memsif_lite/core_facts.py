"""CoreFacts (paper §3.3): schema-guided facts written when a Topical Segment closes.

Candidates ``<subject, type, stmt, meta>`` come from the LLM (JSON, validated against the
schema; the segment's trajectory supplies earlier context) or, offline and whenever the LLM
fails, from a deterministic extractor of the clearest first-person statements (below). Before a
candidate is written, existing facts with the same subject and type (and the most similar ones)
are retrieved and one operation is chosen:

* **Add** a new fact;  **Update** an existing fact with compatible new evidence (statement
  rewritten, provenance extended);  **Merge** a duplicate into an existing fact (provenance
  extended);  **Supersede** an outdated fact: it gets ``valid_to`` and ``superseded_by`` and stays
  queryable for historical questions.

Offline the operation is: Merge for an exact duplicate (same subject, type, normalised
statement); Supersede when a single-valued attribute (``slot``: where someone lives, is from,
works, their name, age, a favourite) gets a different value from a later message; else Add.
Every change is written to ``fact_history``.

The offline extractor only turns first-person sentences of these shapes into facts; it never
infers anything else (the subject is the speaker):

* Identity: "I live in / I moved to / I'm from / I work as|at|for / my name is / I'm N years old"
* Relation: "my sister|brother|mom|dad|wife|husband|partner|son|daughter|friend|dog|cat… (named) X"
* Preference: "I love|like|enjoy|adore|hate|prefer X", "my favourite K is X"
* Event: "I adopted|started|finished|joined|signed|visited|graduated|bought|won|ran|completed|
  quit|launched|published X", dated with the message's date.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import apsw
import numpy as np

from . import prompts
from .config import FactType
from .timeutil import now_stored

__all__ = ["Candidate", "extract_offline", "CoreFactWriter", "normalise_stmt"]

log = logging.getLogger("memsif_lite")

_STOP_AT = re.compile(r"\s+(?:and|but|because|so|which|who|since|when|while|although|though|if)\s+|[,;:()\"]|\s+-\s+"
                      r"|\s+(?:last|next|this|yesterday|today|tomorrow|ago|recently|now|soon)\b")
_PLACE = re.compile(r"^(?:[A-Z][\w'.-]*)(?:\s+(?:(?:of|de|da|do|del|la|le|upon|on)\s+)?[A-Z][\w'.-]*)*")
_PRONOUN_START = re.compile(r"^(?:it|that|this|you|them|him|her|those|these|how|what|when|where|why|seeing|hearing|"
                            r"the idea|your|yours|doing that|to hear|too|so much|a lot)\b", re.I)
_RELATIONS = ("sister|brother|mother|mom|mum|father|dad|wife|husband|partner|boyfriend|girlfriend|son|daughter|"
              "best friend|friend|colleague|boss|grandmother|grandma|grandfather|grandpa|aunt|uncle|cousin|"
              "niece|nephew|dog|cat|puppy|kitten|fiance|fiancee")

# (type, slot or None, regex, formatter(subject, match, date) -> stmt)
_RULES: list[tuple[str, str | None, re.Pattern, Callable[[str, re.Match, str], str]]] = [
    ("Identity", "lives in", re.compile(r"\bI(?:'m| am)? ?(?:now |currently )?(?:live|living) in ([A-Z][^.!?]*)"),
     lambda s, m, d: f"{s} lives in {_place(m.group(1))}"),
    ("Identity", "lives in", re.compile(r"\bI(?:'ve| have)? ?(?:just |recently |finally )?moved to ([A-Z][^.!?]*)"),
     lambda s, m, d: f"{s} lives in {_place(m.group(1))}"),
    ("Identity", "is from", re.compile(r"\bI(?:'m| am) (?:originally )?from ([A-Z][^.!?]*)"),
     lambda s, m, d: f"{s} is from {_place(m.group(1))}"),
    ("Identity", "works", re.compile(r"\bI(?:'m| am)? ?(?:now |currently )?work(?:ing)? (as an? |at |for )([^.!?]*)", re.I),
     lambda s, m, d: f"{s} works {m.group(1).strip()} {_obj(m.group(2))}"),
    ("Identity", "name", re.compile(r"\b[Mm]y name is ([A-Z][a-z]+(?: [A-Z][a-z]+)?)"),
     lambda s, m, d: f"{s}'s name is {m.group(1)}"),
    ("Identity", "age", re.compile(r"\bI(?:'m| am) (\d{1,3}) years old", re.I),
     lambda s, m, d: f"{s} is {m.group(1)} years old (as of {d})"),
    ("Relation", None, re.compile(rf"\b[Mm]y ({_RELATIONS})(?:,)? (?:(?:is )?(?:named|called) )?([A-Z][a-z]+)\b"),
     lambda s, m, d: f"{s} has a {m.group(1).lower()} named {m.group(2)}"),
    ("Preference", None, re.compile(r"\bI (?:really |absolutely |just |truly )?(love|like|enjoy|adore|hate|dislike|prefer) ([^.!?]+)"),
     lambda s, m, d: f"{s} {_verb3(m.group(1))} {_obj(m.group(2))}"),
    ("Preference", "favourite", re.compile(r"\bmy favou?rite ([a-z]+(?: [a-z]+)?) is ([^.!?]+)", re.I),
     lambda s, m, d: f"{s}'s favourite {m.group(1).lower()} is {_obj(m.group(2))}"),
    ("Event", None, re.compile(r"\bI (?:just |recently |finally |have |'ve )?(adopted|started|finished|joined|signed|visited|"
                               r"graduated from|bought|won|ran|completed|quit|launched|published) ([^.!?]+)"),
     lambda s, m, d: f"{s} {m.group(1)} {_obj(m.group(2))} (around {d})"),
]


def _obj(text: str, max_words: int = 8) -> str:
    head = _STOP_AT.split(text.strip(), maxsplit=1)[0]
    words = head.split()[:max_words]
    return " ".join(words).rstrip(" '\"")


def _place(text: str) -> str:
    m = _PLACE.match(text.strip())
    return m.group(0) if m else _obj(text, 4)


def _verb3(v: str) -> str:
    v = v.lower()
    return v + ("es" if v.endswith(("s", "sh", "ch")) else "s")


def normalise_stmt(stmt: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", stmt.lower()).split())


@dataclass(frozen=True)
class Candidate:
    subject: str
    type: str
    stmt: str
    message_ids: tuple[int, ...]
    at: str                       # time of the (latest) supporting message
    slot: str | None = None
    origin: str = "rule"


def extract_offline(messages: Sequence[tuple[int, str, str, str]], schema: Sequence[FactType]) -> list[Candidate]:
    """Candidates from (id, speaker, text, at) rows; only types present in the schema."""
    allowed = {t.name.lower(): t.name for t in schema}
    out: list[Candidate] = []
    seen: set[tuple[str, str]] = set()
    for mid, speaker, text, at in messages:
        day = at[:10]
        for sentence in re.split(r"(?<=[.!?])\s+|\n", text):
            for ftype, slot, rx, fmt in _RULES:
                if ftype.lower() not in allowed:
                    continue
                for m in rx.finditer(sentence):
                    obj = m.groups()[-1]
                    if ftype != "Identity" and (not obj or _PRONOUN_START.match(obj.strip())):
                        continue
                    stmt = fmt(speaker, m, day).strip()
                    if len(stmt.split()) < 3 or stmt.endswith((" a", " an", " the", " my")):
                        continue
                    key = (normalise_stmt(stmt), speaker.lower())
                    if key in seen:
                        continue
                    seen.add(key)
                    slot_key = slot
                    if slot == "favourite":
                        slot_key = "favourite " + m.group(1).lower()
                    out.append(Candidate(speaker, allowed[ftype.lower()], stmt, (mid,), at, slot_key))
    return out


class CoreFactWriter:
    """Extracts candidates from a closed segment and applies Add/Update/Merge/Supersede."""

    def __init__(self, con: apsw.Connection, *, schema: Sequence[FactType], embed_passages, llm=None):
        self.con = con
        self.schema = tuple(schema)
        self.embed_passages = embed_passages  # list[str] -> np.ndarray
        self.llm = llm

    # -- extraction ------------------------------------------------------------------------
    def _segment_rows(self, segment_id: int) -> list[tuple[int, str, str, str]]:
        return self.con.execute(
            "SELECT m.id, m.speaker, m.text, m.at FROM message_units u JOIN messages m ON m.id=u.message_id "
            "WHERE u.segment_id=? ORDER BY m.id", (segment_id,)).fetchall()

    def _trajectory_context(self, segment_id: int, limit: int = 6) -> list[str]:
        rows = self.con.execute(
            "SELECT m.speaker, m.text, m.at FROM segments s JOIN segments o ON o.trajectory_id=s.trajectory_id "
            "JOIN message_units u ON u.segment_id=o.id JOIN messages m ON m.id=u.message_id "
            "WHERE s.id=? AND o.id<? ORDER BY m.id DESC LIMIT ?", (segment_id, segment_id, limit)).fetchall()
        return [f"[{a[:10]}] {s}: {t[:400]}" for s, t, a in reversed(rows)]

    def candidates(self, segment_id: int) -> list[Candidate]:
        rows = self._segment_rows(segment_id)
        if self.llm is not None:
            system, user, validate = prompts.extract_facts(
                [f"[{a[:10]}] {s}: {t[:600]}" for _, s, t, a in rows], self._trajectory_context(segment_id), self.schema)
            got = self.llm.complete_json("fact_extract", system, user, validate, max_tokens=600)
            if got is not None:
                return [Candidate(subj, ftype, stmt, tuple(rows[i][0] for i in lines),
                                  max(rows[i][3] for i in lines), None, "llm")
                        for subj, ftype, stmt, lines in got]
        return extract_offline(rows, self.schema)

    # -- writing ---------------------------------------------------------------------------
    def consolidate(self, segment_id: int) -> list[int]:
        """Extract and write the facts of a closed segment; returns the ids touched."""
        touched = []
        for c in self.candidates(segment_id):
            touched.append(self.write(c))
        return touched

    def related(self, c: Candidate, vec: np.ndarray, k: int = 5) -> list[tuple]:
        """Current facts with the same subject and type, plus the most similar ones."""
        rows = self.con.execute(
            "SELECT id, subject, type, stmt, slot, valid_from FROM core_facts WHERE valid_to IS NULL "
            "AND lower(subject)=lower(?) AND type=? ORDER BY id DESC LIMIT 20", (c.subject, c.type)).fetchall()
        have = {r[0] for r in rows}
        n = self.con.execute("SELECT count(*) FROM fact_vec").fetchone()[0]
        if n:
            for (fid,) in self.con.execute("SELECT rowid FROM fact_vec WHERE embedding MATCH ? AND k = ?",
                                           (vec.astype(np.float32).tobytes(), min(k, n))):
                if fid not in have:
                    r = self.con.execute("SELECT id, subject, type, stmt, slot, valid_from FROM core_facts "
                                         "WHERE id=? AND valid_to IS NULL", (fid,)).fetchone()
                    if r:
                        rows.append(r)
                        have.add(fid)
        return rows[:k + 5]

    def write(self, c: Candidate) -> int:
        vec = self.embed_passages([c.stmt])[0]
        related = self.related(c, vec)
        op = self.decide_offline(c, related)
        if self.llm is not None and related:
            system, user, validate = prompts.fact_operation(c.subject, c.type, c.stmt, [r[3] for r in related])
            got = self.llm.complete_json("fact_operation", system, user, validate, max_tokens=200)
            if got is not None:
                name, target, stmt = got
                op = (name, related[target][0] if target is not None else None, stmt or c.stmt)
        name, target, stmt = op
        now = now_stored()
        if name in ("merge", "update") and target is not None:
            if name == "update" and stmt != self._stmt(target):
                self.con.execute("UPDATE core_facts SET stmt=?, updated_at=? WHERE id=?", (stmt, now, target))
                self.con.execute("UPDATE fact_vec SET embedding=? WHERE rowid=?",
                                 (self.embed_passages([stmt])[0].tobytes(), target))
            else:
                self.con.execute("UPDATE core_facts SET updated_at=? WHERE id=?", (now, target))
            self._sources(target, c.message_ids)
            self._history(target, name, self._stmt(target), f"from messages {list(c.message_ids)}")
            return target
        fid = self._insert(c, stmt, vec if stmt == c.stmt else self.embed_passages([stmt])[0], now)
        if name == "supersede" and target is not None:
            self.con.execute("UPDATE core_facts SET valid_to=?, superseded_by=?, updated_at=? WHERE id=?",
                             (c.at, fid, now, target))
            self._history(target, "superseded", self._stmt(target), f"superseded by fact {fid}")
            self._history(fid, "supersede", stmt, f"supersedes fact {target}")
        else:
            self._history(fid, "add", stmt, None)
        return fid

    def decide_offline(self, c: Candidate, related: Sequence[tuple]) -> tuple[str, int | None, str]:
        key = normalise_stmt(c.stmt)
        for fid, subj, ftype, stmt, slot, valid_from in related:
            if subj.lower() == c.subject.lower() and ftype == c.type and normalise_stmt(stmt) == key:
                return ("merge", fid, stmt)
        if c.slot:
            for fid, subj, ftype, stmt, slot, valid_from in related:
                if subj.lower() == c.subject.lower() and slot == c.slot and valid_from <= c.at:
                    return ("supersede", fid, c.stmt)
        return ("add", None, c.stmt)

    def _stmt(self, fid: int) -> str:
        return self.con.execute("SELECT stmt FROM core_facts WHERE id=?", (fid,)).fetchone()[0]

    def _insert(self, c: Candidate, stmt: str, vec: np.ndarray, now: str) -> int:
        self.con.execute(
            "INSERT INTO core_facts(subject, type, stmt, slot, valid_from, created_at, updated_at, origin) "
            "VALUES(?,?,?,?,?,?,?,?)", (c.subject, c.type, stmt, c.slot, c.at, now, now, c.origin))
        fid = self.con.last_insert_rowid()
        self.con.execute("INSERT INTO fact_vec(rowid, embedding) VALUES(?, ?)", (fid, vec.astype(np.float32).tobytes()))
        self._sources(fid, c.message_ids)
        return fid

    def _sources(self, fid: int, message_ids: Sequence[int]) -> None:
        for mid in message_ids:
            self.con.execute("INSERT OR IGNORE INTO fact_sources(fact_id, message_id) VALUES(?,?)", (fid, mid))

    def _history(self, fid: int, op: str, stmt: str, detail: str | None) -> None:
        self.con.execute("INSERT INTO fact_history(fact_id, at, op, stmt, detail) VALUES(?,?,?,?,?)",
                         (fid, now_stored(), op, stmt, detail))

