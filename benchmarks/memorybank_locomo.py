"""MemoryBank's user ↔ AI-companion chats as LoCoMo-format files, with the probing questions we labelled.

    python benchmarks/memorybank_locomo.py ../shared/data/memorybank OUT_DIR

MemoryBank (../shared/data/memorybank, MIT) ships questions without answers or evidence; the users
and questions used, with the gold answers, evidence ids and categories we gave them by reading the
histories, are in ``benchmarks/data/memorybank_labels.json``. Each day of a user is a session
(``8:00 pm`` of that day: the data have dates only); each exchange is two turns, the user's message
then the companion's reply, one minute apart. Only labelled users are written. A development figure
only: the chats were generated with an LLM.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

LABELS = Path(__file__).resolve().parent / "data" / "memorybank_labels.json"
ASSISTANT = "AI companion"


def to_locomo(name: str, user: dict[str, Any], qa: list[dict[str, Any]]) -> dict[str, Any]:
    """One user's history as a LoCoMo conversation (sessions = days) with ``qa``."""
    conv: dict[str, Any] = {"sample_id": f"memorybank-{name}", "speaker_a": name, "speaker_b": ASSISTANT}
    for n, (day, exchanges) in enumerate(sorted(user["history"].items()), start=1):
        d = date.fromisoformat(day)
        conv[f"session_{n}_date_time"] = f"8:00 pm on {d.day} {d.strftime('%B')}, {d.year}"
        turns: list[dict[str, str]] = []
        for e in exchanges:
            turns.append({"speaker": name, "dia_id": f"D{n}:{len(turns) + 1}", "text": str(e["query"])})
            turns.append({"speaker": ASSISTANT, "dia_id": f"D{n}:{len(turns) + 1}", "text": str(e["response"])})
        conv[f"session_{n}"] = turns
    conv["qa"] = qa
    return conv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="the memorybank folder (memory_bank_en.json)")
    ap.add_argument("out")
    args = ap.parse_args()
    bank = {k.strip(): v for k, v in json.loads((Path(args.data) / "memory_bank_en.json").read_text()).items()}
    labels = json.loads(LABELS.read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, qa in labels.items():
        if name == "about":
            continue
        conv = to_locomo(name, bank[name], qa)
        known = {t["dia_id"] for k, v in conv.items() if k.startswith("session_") and isinstance(v, list) for t in v}
        missing = [e for q in qa for e in q["evidence"] if e not in known]
        if missing:
            raise SystemExit(f"{name}: evidence ids name no turn: {missing}")
        (out / f"{name}.json").write_text(json.dumps(conv, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"{name}: {sum(len(v) for k, v in conv.items() if isinstance(v, list) and k != 'qa')} turns, "
              f"{len(qa)} questions", file=sys.stderr)


if __name__ == "__main__":
    main()
