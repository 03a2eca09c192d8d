"""Load conversations: JSONL (one ``{"speaker","text","at","session","source_id"}`` per line, or
chat-style ``{"role","content"}`` lines) and LoCoMo (per-conversation files and the list-shaped
``locomo10.json``). Importers only produce message dicts; storing goes through
:meth:`Memory.add_many` like everything else.

JSONL keys: ``speaker``, ``text``, ``at``, ``session``, ``source_id`` (``id`` is taken as
``source_id``); chat lines have ``role`` and ``content`` instead of ``speaker`` and ``text``, the
role mapped through ``speaker_map`` (default: the role itself, e.g. ``user``/``assistant``). Any
other key is refused with its line number (``timestamp`` is not an alias of ``at``: a date that
silently became "now" would be worse than an error). A ``null`` value counts as absent.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .core_facts import check_user_speaker
from .errors import InvalidInputError
from .ingest import MessageIn
from .timeutil import parse_locomo_date

__all__ = ["read_jsonl", "jsonl_lines", "read_locomo", "locomo_samples", "locomo_turns", "read_any", "read_labeled",
           "parse_speaker_map", "SpeakerMap", "check_messages"]

_SESSION_KEY = re.compile(r"^session_(\d+)$")


_KEYS = ("speaker", "text", "at", "session", "source_id")
_BOM = "\ufeff"
_CHAT = frozenset({"role", "content"})


class SpeakerMap(dict[str, str]):
    """Role → speaker name for chat lines; remembers the roles it was asked about, so that a
    mapped role no line has (a typo, ``system`` in a file without one) can be reported."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.seen: set[str] = set()

    def speaker(self, role: str) -> str:
        self.seen.add(role)
        return self.get(role, role)

    def unused(self) -> list[str]:
        return sorted(set(self) - self.seen)


def parse_speaker_map(spec: str | None) -> SpeakerMap:
    """``"user=Ana,assistant=Bot"`` → ``{"user": "Ana", "assistant": "Bot"}``."""
    out = SpeakerMap()
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        role, sep, name = part.partition("=")
        if not sep or not role.strip() or not name.strip():
            raise InvalidInputError(f"speaker map entries look like role=Name, got {part.strip()!r}")
        if role.strip() == "user":
            check_user_speaker(name)
        out[role.strip()] = name.strip()
    return out


def check_messages(messages: Iterable[Any], max_chars: int) -> None:
    """Validate message dicts as :meth:`Memory.add_many` will, without a memory file: a command
    refuses bad input before it creates anything (raises :class:`InvalidMessageError`)."""
    for i, m in enumerate(messages):
        MessageIn.from_mapping(m, index=i, max_chars=max_chars)


def _item(obj: Any, where: str, speaker_map: SpeakerMap) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InvalidInputError(f"{where}: expected an object")
    obj = {k: v for k, v in obj.items() if v is not None}
    chat = bool(_CHAT & set(obj))
    if chat and ("speaker" in obj or "text" in obj):
        raise InvalidInputError(f"{where}: give either speaker/text or role/content, not both")
    unknown = sorted(set(obj) - set(_KEYS) - {"id"} - (_CHAT if chat else set()))
    if unknown:
        hint = " (use 'at' for the time)" if {"timestamp", "time", "date"} & set(unknown) else ""
        raise InvalidInputError(f"{where}: unknown keys {unknown}{hint}; expected {', '.join(_KEYS)} "
                                "or role/content")
    item = {k: obj[k] for k in _KEYS if k in obj}
    if chat:
        role = obj.get("role")
        item["speaker"] = speaker_map.speaker(role) if isinstance(role, str) else role
        item["text"] = obj.get("content")
    if "id" in obj and "source_id" not in item:
        item["source_id"] = str(obj["id"])
    return item


def jsonl_lines(lines: Iterable[str], name: str, speaker_map: Mapping[str, str] | None = None
                ) -> list[tuple[str, dict[str, Any]]]:
    """``(name:line, message dict)`` for every non-blank line; a bad line raises with its number.
    A UTF-8 byte-order mark (Windows tools write one) is skipped on the first line. Roles looked
    up in a :class:`SpeakerMap` are recorded in it."""
    smap = speaker_map if isinstance(speaker_map, SpeakerMap) else SpeakerMap(speaker_map or {})
    out = []
    for n, line in enumerate(lines, start=1):
        if n == 1:
            line = line.removeprefix(_BOM)
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"{name}:{n}: not JSON ({e})") from None
        out.append((f"{name}:{n}", _item(obj, f"{name}:{n}", smap)))
    return out


def read_jsonl(path: str | Path, speaker_map: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [m for _, m in jsonl_lines(fh, str(path), speaker_map)]


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
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, json.JSONDecodeError) as e:
        raise InvalidInputError(f"cannot read {path}: {e}") from None
    return [list(locomo_turns(s["conversation"])) for s in locomo_samples(data)]


def read_any(path: str | Path) -> list[dict[str, Any]]:
    """JSONL or LoCoMo, by content; several LoCoMo conversations are concatenated."""
    p = Path(path)
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        return read_jsonl(p)
    return [m for conv in read_locomo(p) for m in conv]


def read_labeled(text: str, name: str, speaker_map: Mapping[str, str] | None = None
                 ) -> list[tuple[str, dict[str, Any]]]:
    """``(where, message dict)`` from the text of a JSONL or LoCoMo file (by content): ``where``
    is ``name:LINE`` for JSONL, ``name: conversation C, session S, turn T`` for LoCoMo. A
    leading byte-order mark is skipped."""
    text = text.removeprefix(_BOM)
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    locomo = isinstance(whole, list) or (isinstance(whole, dict) and (
        "conversation" in whole or any(_SESSION_KEY.match(k) for k in whole)))
    if not locomo:
        return jsonl_lines(text.splitlines(), name, speaker_map)
    out = []
    for c, sample in enumerate(locomo_samples(whole), start=1):
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            raise InvalidInputError(f"{name}: conversation {c} is not a LoCoMo conversation")
        for i, m in enumerate(locomo_turns(sample["conversation"]), start=1):
            out.append((f"{name}: conversation {c}, session {m['session']}, message {i}", m))
    return out
