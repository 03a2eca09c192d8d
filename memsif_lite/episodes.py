"""Topical Segments as episodes (issue 26): the rules that hold whatever φ says.

* **An episode ends** at a session change, or when the message comes more than ``segment_gap_s``
  after the open segment's last message: linking episodes across time is the Event Trajectories' job.
* **The rest of a burst, or a reaction, attaches**: the next message of the same speaker within
  ``burst_s`` seconds, or a short reaction with no content word and no number ("lol", "omg yes",
  "👍"), joins the open segment instead of being judged by φ (which is low between short
  messages, so it would cut one thought into crumbs, and a reaction would start an episode).

The query side: a top-ranked message comes with the rest of its burst, the same speaker's messages
next to it in its segment, each within a small token allowance (:func:`with_neighbours`).

Measured on held-out splits of the LoCoMo development half and its chat-style variant
(benchmarks/README.md, "Episodes"); neighbours of any speaker were measured and removed, short
reactions removed and, measured again on the final tree, restored.
"""

from __future__ import annotations

import re
from typing import Sequence

from .answers import has_content_words
from .db import Database, MessageRow
from .timeutil import from_stored
from .tokens import count_tokens

__all__ = ["boundary_rule", "is_reaction", "with_neighbours", "END", "ATTACH", "NEIGHBOURS_OF_TOP", "NEIGHBOUR_TOKENS",
           "NEIGHBOUR_WINDOW"]

#: the decisions these rules record for a message (next to φ's first / merge / split / judge_*)
END, ATTACH = "episode_end", "attach"
_DIGIT = re.compile(r"\d")
#: query: the rest of the burst of this many best-ranked messages comes with them; 0: off
NEIGHBOURS_OF_TOP = 10
#: query: a neighbour comes only if it has at most this many tokens (a short piece of the same thought)
NEIGHBOUR_TOKENS = 40
#: query: neighbours up to this many positions away in the segment, on either side
NEIGHBOUR_WINDOW = 3


def boundary_rule(prev: MessageRow | None, new: MessageRow, last_at: str, *, gap_s: float,
                  burst_s: float) -> str | None:
    """:data:`END` or :data:`ATTACH` when an episode rule decides where ``new`` goes, else None (φ
    decides). ``prev`` is the open segment's last message when known, ``last_at`` its latest time."""
    gap = (from_stored(new.at) - from_stored(last_at)).total_seconds()  # < 0: an older message added late
    if abs(gap) > gap_s or (prev is not None and prev.session != new.session):
        return END
    if prev is None or gap < 0:
        return None
    if burst_s > 0 and prev.speaker == new.speaker and gap <= burst_s:
        return ATTACH
    return ATTACH if is_reaction(new.text) else None


def is_reaction(text: str) -> bool:
    """A short reaction: no number and no content word (answers.has_content_words)."""
    return not _DIGIT.search(text) and not has_content_words(text, 1)


def with_neighbours(db: Database, ranked: Sequence[int], rows: dict[int, MessageRow], top: int) -> list[int]:
    """The ranking with the neighbours of each of the ``top`` best-ranked messages placed right
    after it: the unbroken run of the same speaker's messages up to :data:`NEIGHBOUR_WINDOW`
    positions away in its Topical Segment, those of at most :data:`NEIGHBOUR_TOKENS` tokens. Their
    rows are added to ``rows``."""
    if top <= 0:
        return list(ranked)
    heads = list(dict.fromkeys(ranked[:top]))
    seg_of = db.structure.segments_of_messages(heads)
    members = db.structure.members("segment", sorted(set(seg_of.values())))
    window: dict[int, tuple[list[int], list[int]]] = {}  # before (nearest first), after
    for m in heads:
        sid = seg_of.get(m)
        ids = members.get(sid, []) if sid is not None else []
        if m in ids:
            i = ids.index(m)
            window[m] = (ids[max(0, i - NEIGHBOUR_WINDOW):i][::-1], ids[i + 1:i + 1 + NEIGHBOUR_WINDOW])
    rows.update(db.messages.many([n for w in window.values() for side in w for n in side if n not in rows]))
    near: dict[int, list[int]] = {}
    for m, sides in window.items():
        near[m] = []
        for side in sides:
            for n in side:
                if n not in rows or rows[n].speaker != rows[m].speaker:
                    break
                near[m].append(n)
    out: list[int] = []
    seen: set[int] = set()
    for mid in ranked:
        if mid in seen:
            continue
        out.append(mid)
        seen.add(mid)
        for n in sorted(near.get(mid, ())):
            if n not in seen and _tokens(rows[n]) <= NEIGHBOUR_TOKENS:
                out.append(n)
                seen.add(n)
    return out


def _tokens(r: MessageRow) -> int:
    return r.tokens if r.tokens is not None else count_tokens(r.text)
