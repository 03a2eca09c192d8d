"""Load conversations: JSONL (one ``{"speaker","text","at","session"}`` per line) and LoCoMo
(per-conversation files and the list-shaped ``locomo10.json``). Importers only produce
message dicts; storing goes through :meth:`Memory.add_many` like everything else."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

from .errors import InvalidInputError
from .timeutil import parse_locomo_date

__all__ = ["read_jsonl", "read_locomo", "locomo_samples", "locomo_turns", "read_any"]

_SESSION_KEY = re.compile(r"^session_(\d+)$")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidInputError(f"{path}:{n}: not JSON ({e})") from None
            if not isinstance(obj, dict):
                raise InvalidInputError(f"{path}:{n}: expected an object")
            item = {k: obj[k] for k in ("speaker", "text", "at", "session", "source_id") if obj.get(k) is not None}
            if "id" in obj and "source_id" not in item:
                item["source_id"] = str(obj["id"])
            out.append(item)
    return out


def locomo_samples(data: Any) -> list[dict[str, Any]]:
    """Normalise either LoCoMo shape to a list of samples ``{"sample_id", "conversation", "qa"}``."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and "conversation" in data:
        return [data]
    if isinstance(data, dict) and any(_SESSION_KEY.match(k) for k in data):
        return [{"sample_id": data.get("sample_id"), "conversation": data, "qa": data.get("qa", [])}]
    raise InvalidInputError("not a LoCoMo conversation: no session_N keys")


def locomo_turns(conversation: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Messages of one LoCoMo conversation in order. Turns of a session are one minute apart
    from the session's date; a shared photo becomes ``[shares a photo of ...]`` in the text."""
    sessions = sorted((int(m.group(1)), k) for k in conversation if (m := _SESSION_KEY.match(k)))
    for num, key in sessions:
        turns = conversation[key]
        if not isinstance(turns, list):
            continue
        date = conversation.get(f"{key}_date_time")
        start = parse_locomo_date(date) if date else None
        for i, t in enumerate(turns):
            text = str(t.get("text") or "").strip()
            if t.get("blip_caption"):
                photo = f"[shares a photo of {str(t['blip_caption']).strip()}]"
                text = f"{text} {photo}".strip()
            if not text:
                continue
            item = {"speaker": t["speaker"], "text": text, "session": str(num), "source_id": t.get("dia_id")}
            if start is not None:
                item["at"] = start + timedelta(minutes=i)
            yield item


def read_locomo(path: str | Path) -> list[list[dict[str, Any]]]:
    """Every conversation in a LoCoMo file, each as a list of message dicts."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise InvalidInputError(f"cannot read {path}: {e}") from None
    return [list(locomo_turns(s["conversation"])) for s in locomo_samples(data)]


def read_any(path: str | Path) -> list[dict[str, Any]]:
    """JSONL or LoCoMo, by content; several LoCoMo conversations are concatenated."""
    p = Path(path)
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        return read_jsonl(p)
    return [m for conv in read_locomo(p) for m in conv]
