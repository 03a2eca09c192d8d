"""Derive a chat-style variant of a LoCoMo conversation (a development set that looks like real chat).

    python benchmarks/chatify.py ../shared/data/locomo OUT_DIR [--seed 0]

Real chat is not LoCoMo: messages are short, come in bursts of several messages per thought, are
often lowercase, drop punctuation, carry typos and slang, and are interleaved with short reactions.
This seeded, deterministic transform rewrites each conversation accordingly and writes one
LoCoMo-format file per conversation (``OUT_DIR/<sample id>.json``) that ``benchmarks/locomo.py``
reads like the original:

* each turn becomes one message per sentence (two short sentences are sometimes sent together, a
  long one is sometimes cut once more at a comma or conjunction), a shared photo becomes a message
  of its own;
* per speaker a propensity to write in lowercase (names too) and to drop final punctuation;
  chat abbreviations ("you" → "u", "because" → "bc") and typos (a swap, drop or doubling of a
  letter inside a word of more than 4 letters), uniformly, answer words included;
* short reactions ("lol", "omg yes", "wait what", emoji) by the other speaker between turns;
* per-message times: every turn carries ``offset_s``, seconds since its session's start (pieces of
  one turn a few seconds apart, a minute or so between turns); ``locomo.py`` reads it, the
  original LoCoMo files have none (the importer then puts turns one minute apart);
* ids renumbered ``D<session>:<n>``; each question keeps its place, ``evidence`` lists the ids of
  all pieces of its evidence turns and ``evidence_turns`` groups them per original turn, so that
  ``locomo.py`` can score a gold turn as present when *any* piece is in the context and, beside
  it, when *all* pieces are (the first can be met by a crumb; the second cannot be gamed that way).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import conversation_files  # noqa: E402

_SESSION = re.compile(r"^session_(\d+)$")
_EVID = re.compile(r"D:?(\d+):(\d+)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")
_CUT = re.compile(r"(?<=,)\s+|\s+(?=(?:and|but|so|because)\s)")
_WORD = re.compile(r"[A-Za-z]+")

REACTIONS = ("lol", "omg yes", "haha", "nice", "wait what", "😂", "❤️", "omg", "aww", "yesss", "no way",
             "ikr", "same", "wow", "hahaha", "👍", "true", "damn", "love that", "oh nice")
SLANG = {"you": "u", "your": "ur", "are": "r", "because": "bc", "really": "rly", "though": "tho",
         "going to": "gonna", "want to": "wanna", "i am": "im", "i'm": "im", "don't": "dont", "okay": "ok",
         "can't": "cant", "that's": "thats", "tonight": "tonite", "thanks": "thx", "to be honest": "tbh",
         "by the way": "btw", "oh my god": "omg", "it's": "its", "probably": "prob"}
_SLANG = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(SLANG, key=len, reverse=True)) + r")\b", re.I)


def stable_seed(seed: int, name: str) -> int:
    """A per-conversation seed independent of Python's hash randomisation."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{name}".encode()).digest()[:8], "big")


def sentences(text: str, rng: random.Random) -> list[str]:
    """A turn's text as chat messages: its sentences, a long one sometimes cut once more."""
    out: list[str] = []
    for s in _SENTENCE.split(text.strip()):
        parts = _CUT.split(s, maxsplit=1)
        if len(s.split()) > 16 and len(parts) == 2 and min(len(p.split()) for p in parts) >= 5 and rng.random() < 0.5:
            out.extend(p.strip() for p in parts)
        elif out and len(out[-1].split()) + len(s.split()) <= 18 and rng.random() < 0.5:
            out[-1] = f"{out[-1]} {s.strip()}"  # two short sentences sent as one message
        elif s.strip():
            out.append(s.strip())
    return out


def typo(word: str, rng: random.Random) -> str:
    """One letter swapped with its neighbour, dropped or doubled, inside the word."""
    i = rng.randrange(1, len(word) - 2)
    kind = rng.choice(("swap", "drop", "double"))
    if kind == "swap":
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == "drop":
        return word[:i] + word[i + 1:]
    return word[:i] + word[i] + word[i:]


def casual(text: str, style: dict[str, float], rng: random.Random) -> str:
    """Chat style for one message: abbreviations, typos, lowercase, dropped final punctuation."""
    if rng.random() < style["slang"]:
        text = _SLANG.sub(lambda m: SLANG[m.group(0).lower()], text)
    text = _WORD.sub(lambda m: typo(m.group(0), rng) if len(m.group(0)) > 4 and rng.random() < style["typo"]
                     else m.group(0), text)
    if rng.random() < style["lower"]:
        text = text.lower()
    if text.endswith((".", "!", ",")) and rng.random() < style["drop_punct"]:
        text = text.rstrip(".!,")
    elif text.endswith("?") and rng.random() < style["drop_punct"] / 3:
        text = text.rstrip("?")
    return text


def speaker_styles(speakers: list[str], rng: random.Random, scale: float = 1.0) -> dict[str, dict[str, float]]:
    """Each speaker writes their own way: one mostly lowercase, the other less so. ``scale``
    multiplies every rate (0: the sentences exactly as written, so splitting is measured alone)."""
    lows = [0.85, 0.35]
    rng.shuffle(lows)
    return {s: {"lower": scale * lows[i % 2], "drop_punct": scale * rng.uniform(0.5, 0.9),
                "slang": scale * rng.uniform(0.2, 0.6), "typo": scale * rng.uniform(0.02, 0.05)}
            for i, s in enumerate(speakers)}


def chatify_sample(sample: dict[str, Any], seed: int, name: str, casual_scale: float = 1.0
                   ) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The chat-style conversation (LoCoMo format, with ``qa`` remapped) and the id map
    (original turn id → the ids of its pieces, in order)."""
    rng = random.Random(stable_seed(seed, name))
    conv = sample["conversation"]
    speakers = [conv.get("speaker_a", "A"), conv.get("speaker_b", "B")]
    styles = speaker_styles(speakers, rng, casual_scale)
    out: dict[str, Any] = {"sample_id": f"{name}-chat", "speaker_a": speakers[0], "speaker_b": speakers[1]}
    id_map: dict[str, list[str]] = {}
    for num in sorted(int(m.group(1)) for k in conv if (m := _SESSION.match(k))):
        key = f"session_{num}"
        if not isinstance(conv[key], list):
            continue
        if f"{key}_date_time" in conv:
            out[f"{key}_date_time"] = conv[f"{key}_date_time"]
        out[key] = chat_session(num, conv[key], speakers, styles, rng, id_map)
    out["qa"] = [remap_question(q, id_map) for q in sample.get("qa", [])]
    return out, id_map


def chat_session(num: int, turns: list[dict[str, Any]], speakers: list[str], styles: dict[str, dict[str, float]],
                 rng: random.Random, id_map: dict[str, list[str]]) -> list[dict[str, Any]]:
    """One session's messages; records each original turn id's piece ids in ``id_map``."""
    msgs: list[dict[str, Any]] = []
    clock = 0

    def emit(speaker: str, text: str, gap: int, src: str | None, extra: dict | None = None) -> None:
        nonlocal clock
        clock += gap
        dia = f"D{num}:{len(msgs) + 1}"
        msgs.append({"speaker": speaker, "dia_id": dia, "text": text, "offset_s": clock, **(extra or {})})
        if src is not None:
            id_map.setdefault(src, []).append(dia)

    prev = None
    for t in turns:
        spk, src = str(t.get("speaker")), t.get("dia_id")
        other = next((s for s in speakers if s != spk), spk)
        if prev is not None and prev != spk and rng.random() < 0.25:
            emit(spk, rng.choice(REACTIONS), rng.randint(5, 40), None)  # a reaction to what was just said
        first = True
        for piece in sentences(str(t.get("text") or ""), rng):
            emit(spk, casual(piece, styles.get(spk, styles[speakers[0]]), rng),
                 rng.randint(20, 150) if first else rng.randint(2, 15), src)
            first = False
        if t.get("blip_caption"):
            photo = {k: t[k] for k in ("img_url", "blip_caption", "query") if k in t}
            emit(spk, "", rng.randint(20, 150) if first else rng.randint(3, 20), src, photo)
        if rng.random() < 0.12:
            emit(other, rng.choice(REACTIONS), rng.randint(3, 25), None)
            prev = other
        else:
            prev = spk
    return msgs


def remap_question(q: dict[str, Any], id_map: dict[str, list[str]]) -> dict[str, Any]:
    """The question with ``evidence`` = all pieces of its evidence turns and ``evidence_turns`` =
    those pieces grouped per original turn (ids that name no turn are dropped, as locomo.py does)."""
    groups: list[list[str]] = []
    for e in q.get("evidence", []):
        for m in _EVID.finditer(str(e)):
            d = f"D{m.group(1)}:{m.group(2)}"
            if d in id_map and id_map[d] not in groups:
                groups.append(id_map[d])
    return {**q, "evidence": [p for g in groups for p in g], "evidence_turns": groups}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="a folder of LoCoMo conversation files or a locomo10.json")
    ap.add_argument("out", help="folder for the chat-style files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--casual", type=float, default=1.0,
                    help="scale of lowercase/punctuation/slang/typo rates (0: split into messages only)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for sid, sample in conversation_files(args.data):
        chat, _ = chatify_sample(sample, args.seed, sid, args.casual)
        path = out / f"{sid}.json"
        path.write_text(json.dumps(chat, ensure_ascii=False, indent=1), encoding="utf-8")
        n_old = sum(len(v) for k, v in sample["conversation"].items() if _SESSION.match(k) and isinstance(v, list))
        n_new = sum(len(v) for k, v in chat.items() if _SESSION.match(k))
        print(f"{sid}: {n_old} turns -> {n_new} messages ({path})", file=sys.stderr)


if __name__ == "__main__":
    main()
