"""``Memory.forget``: delete a message or a fact and everything derived only from it.

Provenance makes this exact: a message's vector, full-text row and structure membership go
with it; its segment and trajectory are recomputed from the remaining members (and removed if
empty); CoreFacts whose every source is gone are deleted (a fact they had superseded becomes
current again); ActiveFact evidence from it is removed and the clusters re-scored (a cluster
left without statements disappears, a promotion that no longer holds is withdrawn).
"""

from __future__ import annotations

import json
from collections import Counter

import apsw
import numpy as np

from .matching import unit
from .segments import entity_json

__all__ = ["forget_message", "forget_fact"]


def forget_message(con: apsw.Connection, mid: int, active_store) -> None:
    row = con.execute("SELECT speaker, text FROM messages WHERE id=?", (mid,)).fetchone()
    seg = con.execute("SELECT segment_id FROM message_units WHERE message_id=?", (mid,)).fetchone()
    con.execute("INSERT INTO message_fts(message_fts, rowid, speaker, text) VALUES('delete', ?, ?, ?)",
                (mid, row[0], row[1]))
    con.execute("DELETE FROM message_vec WHERE rowid=?", (mid,))
    con.execute("DELETE FROM message_units WHERE message_id=?", (mid,))
    # CoreFacts
    facts = [f for (f,) in con.execute("SELECT fact_id FROM fact_sources WHERE message_id=?", (mid,)).fetchall()]
    con.execute("DELETE FROM fact_sources WHERE message_id=?", (mid,))
    for fid in facts:
        if con.execute("SELECT count(*) FROM fact_sources WHERE fact_id=?", (fid,)).fetchone()[0] == 0:
            forget_fact(con, fid)
    # ActiveFact evidence
    stmts = [s for (s,) in con.execute("SELECT statement_id FROM cluster_evidence WHERE message_id=?", (mid,)).fetchall()]
    con.execute("DELETE FROM cluster_evidence WHERE message_id=?", (mid,))
    clusters = set()
    for sid in stmts:
        cid = con.execute("SELECT cluster_id FROM cluster_statements WHERE id=?", (sid,)).fetchone()[0]
        clusters.add(cid)
        if con.execute("SELECT count(*) FROM cluster_evidence WHERE statement_id=?", (sid,)).fetchone()[0] == 0:
            con.execute("DELETE FROM cluster_statements WHERE id=?", (sid,))
    for cid in sorted(clusters):
        if con.execute("SELECT count(*) FROM cluster_statements WHERE cluster_id=?", (cid,)).fetchone()[0] == 0:
            af = con.execute("SELECT id FROM active_facts WHERE cluster_id=?", (cid,)).fetchone()
            if af:
                con.execute("DELETE FROM active_fact_vec WHERE rowid=?", (af[0],))
                con.execute("DELETE FROM active_facts WHERE id=?", (af[0],))
            con.execute("DELETE FROM cluster_queries WHERE cluster_id=?", (cid,))
            con.execute("DELETE FROM candidate_clusters WHERE id=?", (cid,))
        else:
            active_store.refresh(cid, withdraw=True)
    con.execute("DELETE FROM messages WHERE id=?", (mid,))
    if seg is not None:
        _recompute_segment(con, seg[0])


def forget_fact(con: apsw.Connection, fid: int) -> None:
    """Delete one CoreFact with its history; a fact it superseded becomes current again."""
    con.execute("UPDATE core_facts SET valid_to=NULL, superseded_by=NULL WHERE superseded_by=?", (fid,))
    con.execute("DELETE FROM fact_sources WHERE fact_id=?", (fid,))
    con.execute("DELETE FROM fact_history WHERE fact_id=?", (fid,))
    con.execute("DELETE FROM fact_vec WHERE rowid=?", (fid,))
    con.execute("DELETE FROM core_facts WHERE id=?", (fid,))


def _members(con: apsw.Connection, where: str, arg: int) -> list[tuple[int, np.ndarray, list[str], str]]:
    rows = con.execute(
        f"SELECT u.message_id, v.embedding, u.entities, m.at FROM message_units u JOIN messages m ON m.id=u.message_id "
        f"JOIN message_vec v ON v.rowid=u.message_id WHERE {where} ORDER BY u.message_id", (arg,)).fetchall()
    return [(r[0], np.frombuffer(r[1], dtype=np.float32), json.loads(r[2]), r[3]) for r in rows]


def _recompute_segment(con: apsw.Connection, sid: int) -> None:
    tid = con.execute("SELECT trajectory_id FROM segments WHERE id=?", (sid,)).fetchone()[0]
    members = _members(con, "u.segment_id=?", sid)
    if not members:
        con.execute("DELETE FROM segment_vec WHERE rowid=?", (sid,))
        con.execute("DELETE FROM segments WHERE id=?", (sid,))
    else:
        total = sum(m[1].astype(np.float64) for m in members)
        ents = Counter(e for m in members for e in m[2])
        con.execute("UPDATE segments SET n_messages=?, vec_sum=?, entities=?, start_at=?, end_at=? WHERE id=?",
                    (len(members), total.tobytes(), entity_json(ents), min(m[3] for m in members),
                     max(m[3] for m in members), sid))
        con.execute("UPDATE segment_vec SET embedding=? WHERE rowid=?", (unit(total / len(members)).tobytes(), sid))
    if tid is not None:
        _recompute_trajectory(con, tid)


def _recompute_trajectory(con: apsw.Connection, tid: int) -> None:
    members = _members(con, "u.segment_id IN (SELECT id FROM segments WHERE trajectory_id=?)", tid)
    if not members:
        con.execute("DELETE FROM trajectory_vec WHERE rowid=?", (tid,))
        con.execute("DELETE FROM trajectories WHERE id=?", (tid,))
        return
    n_seg = con.execute("SELECT count(*) FROM segments WHERE trajectory_id=?", (tid,)).fetchone()[0]
    total = sum(m[1].astype(np.float64) for m in members)
    ents = Counter(e for m in members for e in m[2])
    con.execute("UPDATE trajectories SET n_segments=?, n_messages=?, vec_sum=?, entities=?, start_at=?, end_at=? "
                "WHERE id=?", (n_seg, len(members), total.tobytes(), entity_json(ents), min(m[3] for m in members),
                               max(m[3] for m in members), tid))
    con.execute("UPDATE trajectory_vec SET embedding=? WHERE rowid=?", (unit(total / len(members)).tobytes(), tid))
