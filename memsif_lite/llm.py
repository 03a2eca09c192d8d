"""Every LLM call goes through here: litellm (imported lazily), JSON mode, a timeout, bounded
retries, local validation of the reply, and per-call accounting in the memory file.

A call never raises to the pipeline: on any failure (HTTP error, timeout, non-JSON, wrong
shape) it returns ``None`` after recording the failure, and the caller uses its offline
fallback. Replies are data: they are validated into plain Python values and only ever reach
SQL as bound parameters.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Mapping, TypeVar

from .errors import ConfigError

__all__ = ["LLM", "Prompt", "CallRecord", "import_litellm", "require_litellm", "parse_json_object", "ReplyError"]

log = logging.getLogger("memsif_lite")
T = TypeVar("T")
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?```\s*$", re.S)


class ReplyError(ValueError):
    """The LLM's reply did not match what was asked for."""


_MISSING = ("an LLM (or an API embedding model) needs litellm, which memsif_lite installs only with its "
            "`llm` extra: pip install 'memsif_lite[llm]'")


def require_litellm() -> None:
    """Raise ConfigError naming the ``llm`` extra when litellm is not installed (without importing it)."""
    try:
        found = importlib.util.find_spec("litellm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(_MISSING)


def import_litellm():
    """Import litellm without letting it reach for the network at import time."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    try:
        import litellm
    except ImportError as e:
        raise ConfigError(_MISSING) from e

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


def _reject_constant(name: str) -> Any:
    raise ReplyError(f"non-finite number {name} in reply")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ReplyError(f"duplicate key {k!r} in reply")
        out[k] = v
    return out


def parse_json_object(content: str | None) -> dict[str, Any]:
    """Strictly parse one JSON object (a single ```json fence around it is tolerated)."""
    if not isinstance(content, str) or not content.strip():
        raise ReplyError("empty reply")
    m = _FENCE.match(content)
    text = m.group(1) if m else content
    try:
        obj = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise ReplyError(f"reply is not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise ReplyError("reply is not a JSON object")
    return obj


@dataclass(frozen=True)
class Prompt(Generic[T]):
    """One LLM step: what it is for, the instructions, the user message (memory only inside
    quoted ``<data>`` blocks), the validator that turns the JSON reply into a typed value or
    raises :class:`ReplyError`, and the reply's token limit."""

    purpose: str
    system: str
    user: str
    validate: Callable[[dict[str, Any]], T]
    max_tokens: int = 400


@dataclass(frozen=True)
class CallRecord:
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    ok: bool
    error: str | None


class LLM:
    """A configured chat model. ``record`` receives one CallRecord per call (after its retries);
    ``calls`` counts them. ``kwargs`` go to every litellm call and win over this module's
    defaults (``timeout``, ``temperature``, ``max_tokens``, ``response_format``...)."""

    def __init__(self, model: str, *, timeout: float = 30.0, retries: int = 2,
                 kwargs: Mapping[str, Any] | None = None,
                 record: Callable[[CallRecord], None] | None = None):
        self.model = model
        self.timeout = timeout
        self.retries = retries
        self.kwargs = dict(kwargs or {})
        self.record = record or (lambda r: None)
        self.calls = 0
        self._litellm: Any = None

    def _client(self):
        if self._litellm is None:
            self._litellm = import_litellm()
        return self._litellm

    def complete(self, prompt: Prompt[T]) -> T | None:
        """Ask for one JSON object and return ``prompt.validate(obj)``, or None after recording why not."""
        purpose, validate = prompt.purpose, prompt.validate
        litellm = self._client()
        messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]
        params: dict[str, Any] = {"response_format": {"type": "json_object"}, "temperature": 0,
                                  "max_tokens": prompt.max_tokens, "timeout": self.timeout, "num_retries": 0}
        params.update(self.kwargs)
        t0 = time.perf_counter()
        p_tok = c_tok = 0
        error: str | None = None
        for attempt in range(self.retries + 1):
            try:
                resp = litellm.completion(model=self.model, messages=messages, **params)
                usage = getattr(resp, "usage", None)
                p_tok += int(getattr(usage, "prompt_tokens", 0) or 0)
                c_tok += int(getattr(usage, "completion_tokens", 0) or 0)
                content = resp.choices[0].message.content
                value = validate(parse_json_object(content))
                self._record(purpose, t0, p_tok, c_tok, True, None)
                return value
            except ReplyError as e:
                error = f"bad reply: {e}"
            except Exception as e:  # noqa: BLE001 - litellm maps provider errors to many types
                error = f"{type(e).__name__}: {str(e)[:300]}"
                if attempt < self.retries and _retryable(e):
                    time.sleep(min(0.25 * (2**attempt), 2.0))
                    continue
                break
            # a malformed reply: ask once more (temperature 0 may repeat it; that is bounded)
        log.warning("LLM %s call failed (%s); using the offline fallback", purpose, error)
        self._record(purpose, t0, p_tok, c_tok, False, error)
        return None

    def _record(self, purpose: str, t0: float, p: int, c: int, ok: bool, error: str | None) -> None:
        self.calls += 1
        self.record(CallRecord(purpose, self.model, p, c, (time.perf_counter() - t0) * 1000.0, ok, error))


def _retryable(e: Exception) -> bool:
    name = type(e).__name__
    if name in {"AuthenticationError", "BadRequestError", "NotFoundError", "PermissionDeniedError",
                "ContextWindowExceededError", "UnsupportedParamsError"}:
        return False
    return True
