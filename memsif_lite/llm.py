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
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Generic, Mapping, Sequence, TypeVar

from .errors import ConfigError, LLMError
from .timeutil import now_stored

__all__ = ["LLM", "ModelHealth", "Backoff", "FormatNegotiation", "Prompt", "CallRecord", "import_litellm",
           "require_litellm", "parse_json_object", "ReplyError", "SCHEMA_MODES", "response_format"]

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
    """Strictly parse one JSON object (a single ```json fence around it is tolerated). Raw control
    characters inside strings are let through (llama.cpp's JSON grammar emits them; every text
    field is whitespace-collapsed after validation); everything else about the JSON is strict."""
    if not isinstance(content, str) or not content.strip():
        raise ReplyError("empty reply")
    m = _FENCE.match(content)
    text = m.group(1) if m else content
    try:
        obj = json.loads(text, strict=False, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
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
    #: the JSON schema of a valid reply (valid choices as enums), sent to constrain decoding
    schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class CallRecord:
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    ok: bool
    error: str | None
    #: when the call ended (stored UTC form): a call made ahead is recorded a little later
    at: str | None = None


class Backoff:
    """Notices a model that keeps failing: after ``down_after`` consecutive timeouts or
    connection errors the model counts as down for a back-off period (doubling, up to
    ``max_backoff_s``) and calls return at once; a success resets it."""

    def __init__(self, *, down_after: int = 3, backoff_s: float = 30.0, max_backoff_s: float = 600.0):
        self.down_after, self.base, self.max = down_after, backoff_s, max_backoff_s
        self.failures = 0
        self.down_until = 0.0
        self._backoff = backoff_s
        self._lock = threading.Lock()

    def available(self) -> bool:
        return time.monotonic() >= self.down_until

    def seconds_left(self) -> float:
        return max(0.0, self.down_until - time.monotonic())

    def outage(self) -> None:
        with self._lock:
            self.failures += 1
            if self.failures >= self.down_after:
                self.down_until = time.monotonic() + self._backoff
                log.warning("LLM unreachable %d times in a row: using offline rules for %.0f s",
                            self.failures, self._backoff)
                self._backoff = min(self._backoff * 2, self.max)
                self.failures = 0

    def ok(self) -> None:
        with self._lock:
            self.failures = 0
            self._backoff = self.base


class FormatNegotiation:
    """The way of asking the server for JSON (:data:`SCHEMA_MODES`): the configured one, or with
    ``auto`` the strongest the server has not refused so far."""

    def __init__(self, schema_mode: str = "auto"):
        self.auto = schema_mode == "auto"
        self.mode = "json_schema" if self.auto else schema_mode
        self._lock = threading.Lock()

    def weaker(self, refused: str) -> bool:
        """With ``auto``, step down from a refused way of asking for JSON; False when there is none."""
        with self._lock:
            if not self.auto or refused not in SCHEMA_MODES[:-1]:
                return False
            if self.mode == refused:
                self.mode = SCHEMA_MODES[SCHEMA_MODES.index(refused) + 1]
                log.info("the LLM server refused response_format %s; using %s", refused, self.mode)
            return True


class ModelHealth:
    """What every LLM object of one ``Memory`` (its foreground and background connections) shares
    about its model: the :class:`Backoff` of a model that keeps failing and the
    :class:`FormatNegotiation` of how to ask it for JSON."""

    def __init__(self, *, down_after: int = 3, backoff_s: float = 30.0, max_backoff_s: float = 600.0,
                 schema_mode: str = "auto"):
        self.backoff = Backoff(down_after=down_after, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
        self.formats = FormatNegotiation(schema_mode)

    def available(self) -> bool:
        return self.backoff.available()

    def seconds_left(self) -> float:
        return self.backoff.seconds_left()


class LLM:
    """A configured chat model. ``record`` receives one CallRecord per call (after its retries);
    ``calls`` counts them. ``kwargs`` go to every litellm call and win over this module's
    defaults (``timeout``, ``temperature``, ``max_tokens``, ``response_format``...).

    ``in_transaction`` guards the rule that no LLM call runs while a write transaction is open:
    a call made then is a bug and raises ``RuntimeError``. A failure that is not the model's (a
    bad argument, missing or wrong credentials, an unknown model) raises :class:`LLMError`
    instead of falling back silently forever; the model's own failures (timeouts, HTTP 5xx, bad
    replies) fall back to the offline rule and are recorded."""

    def __init__(self, model: str, *, timeout: float = 30.0, retries: int = 2,
                 kwargs: Mapping[str, Any] | None = None,
                 record: Callable[[CallRecord], None] | None = None,
                 in_transaction: Callable[[], bool] | None = None, health: ModelHealth | None = None,
                 concurrency: int = 1):
        self.model = model
        self.timeout = timeout
        self.retries = retries
        self.kwargs = dict(kwargs or {})
        self.record = record or (lambda r: None)
        self.in_transaction = in_transaction or (lambda: False)
        self.health = health or ModelHealth()
        self.concurrency = concurrency
        self.calls = 0
        self._litellm: Any = None
        self._ready: dict[tuple[str, ...], Future[Any]] = {}  # replies asked ahead, by prompt
        self._records: deque[CallRecord] = deque()  # calls made by the helper threads, not yet recorded
        self._slots = threading.BoundedSemaphore(max(concurrency - 1, 1))

    def prefetch(self, batch: Sequence[Prompt[Any]]) -> int:
        """Start asking independent prompts, at most ``concurrency - 1`` at a time beside this
        thread's own calls; a reply waits for the ``complete`` call that asks the same prompt
        (each is used once). Returns how many were started. The helper threads are daemons that
        touch nothing but the HTTP client: their calls are recorded by this thread, at its next
        call or ``settle``."""
        if self.concurrency < 2:
            return 0
        if self.in_transaction():
            raise RuntimeError("LLM prefetch inside a write transaction (a memsif_lite bug)")
        self._flush()
        self._client()  # imported once, before the threads
        started = 0
        for p in batch:
            k = _prompt_key(p)
            if k in self._ready:
                continue
            fut: Future[Any] = Future()
            self._ready[k] = fut
            threading.Thread(target=self._ask_ahead, args=(p, fut), name="memsif-llm", daemon=True).start()
            started += 1
        return started

    def _ask_ahead(self, prompt: Prompt[Any], fut: Future[Any]) -> None:
        with self._slots:
            if not fut.set_running_or_notify_cancel():
                return  # cancelled by settle() before its turn came
            try:
                fut.set_result(self._call(prompt, self._records.append))
            except BaseException as e:  # noqa: BLE001 - handed to whoever asks for the reply
                fut.set_exception(e)

    def settle(self) -> None:
        """The end of a worker run: prompts not started yet are cancelled; those already asked
        (answered or in flight) are kept for a later run that asks them (the newest few, if
        nobody does); calls made so far are recorded. An exit never waits on the daemon threads."""
        for k, f in list(self._ready.items()):
            if f.cancel():
                del self._ready[k]
        extra = len(self._ready) - 4 * self.concurrency
        for k in [k for k, f in self._ready.items() if f.done()][:max(extra, 0)]:
            del self._ready[k]
        self._flush()

    def _flush(self) -> None:
        while self._records:
            self._record_one(self._records.popleft())

    def _client(self):
        if self._litellm is None:
            self._litellm = import_litellm()
        return self._litellm

    def complete(self, prompt: Prompt[T]) -> T | None:
        """Ask for one JSON object and return ``prompt.validate(obj)``, or None after recording why not."""
        if self.in_transaction():
            raise RuntimeError(f"LLM {prompt.purpose} call inside a write transaction (a memsif_lite bug)")
        self._flush()
        ahead = self._ready.pop(_prompt_key(prompt), None)
        if ahead is None:
            return self._call(prompt, self._record_one)
        try:
            return ahead.result()
        finally:
            self._flush()

    def _record_one(self, r: CallRecord) -> None:
        self.calls += 1
        self.record(r)

    def _call(self, prompt: Prompt[T], record: Callable[[CallRecord], None]) -> T | None:
        purpose, validate = prompt.purpose, prompt.validate
        t0 = time.perf_counter()
        backoff, formats = self.health.backoff, self.health.formats
        if not backoff.available():
            left = backoff.seconds_left()
            self._done(record, purpose, t0, 0, 0, False, f"skipped: model down, retried in {left:.0f} s")
            return None
        litellm = self._client()
        messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]
        p_tok = c_tok = 0
        error: str | None = None
        attempt = 0
        while attempt <= self.retries:
            mode = formats.mode
            params: dict[str, Any] = {"response_format": response_format(mode, prompt), "temperature": 0,
                                      "max_tokens": prompt.max_tokens, "timeout": self.timeout, "num_retries": 0}
            params.update(self.kwargs)
            attempt += 1
            try:
                resp = litellm.completion(model=self.model, messages=messages, **params)
                backoff.ok()
                usage = getattr(resp, "usage", None)
                p_tok += int(getattr(usage, "prompt_tokens", 0) or 0)
                c_tok += int(getattr(usage, "completion_tokens", 0) or 0)
                content = resp.choices[0].message.content
                value = validate(parse_json_object(content))
                self._done(record, purpose, t0, p_tok, c_tok, True, None)
                return value
            except ReplyError as e:
                error = f"bad reply: {e}"
            except Exception as e:  # noqa: BLE001 - litellm maps provider errors to many types
                error = f"{type(e).__name__}: {str(e)[:300]}"
                if "response_format" not in self.kwargs and _format_refused(e) and formats.weaker(mode):
                    attempt -= 1  # the server does not take this way of asking for JSON: ask the next way
                    continue
                if _not_the_models(e):
                    self._done(record, purpose, t0, p_tok, c_tok, False, error)
                    raise LLMError(f"the LLM {self.model!r} cannot be used as configured ({error}); "
                                   "check the model name, llm_kwargs and credentials") from e
                if _outage(e):
                    backoff.outage()
                    if not backoff.available():
                        break
                if attempt <= self.retries and _retryable(e):
                    time.sleep(min(0.25 * (2 ** (attempt - 1)), 2.0))
                    continue
                break
            # a malformed reply: ask once more (temperature 0 may repeat it; that is bounded)
        log.warning("LLM %s call failed (%s); using the offline fallback", purpose, error)
        self._done(record, purpose, t0, p_tok, c_tok, False, error)
        return None

    def _done(self, record: Callable[[CallRecord], None], purpose: str, t0: float, p: int, c: int, ok: bool,
              error: str | None) -> None:
        record(CallRecord(purpose, self.model, p, c, (time.perf_counter() - t0) * 1000.0, ok, error, now_stored()))


def _prompt_key(p: Prompt[Any]) -> tuple[str, ...]:
    return (p.purpose, p.system, p.user, str(p.max_tokens), json.dumps(p.schema, sort_keys=True))


#: ways of asking for JSON, strongest first: an OpenAI-style JSON schema (OpenAI, vLLM, Ollama
#: through litellm), llama-cpp-python's ``json_object`` with a ``schema`` (its server answers HTTP
#: 500 to the first), plain JSON mode. ``auto`` starts with the first and steps down when refused.
SCHEMA_MODES = ("json_schema", "json_object_schema", "json_object")


def response_format(mode: str, prompt: Prompt[Any]) -> dict[str, Any]:
    if prompt.schema is None or mode == "json_object":
        return {"type": "json_object"}
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": prompt.schema}
    return {"type": "json_schema", "json_schema": {"name": f"{prompt.purpose}_reply", "schema": prompt.schema}}


def _format_refused(e: Exception) -> bool:
    """The server refused the ``response_format`` itself (not the model failing)."""
    text = str(e)[:2000]
    return type(e).__name__ in {"BadRequestError", "InternalServerError", "UnprocessableEntityError",
                                "UnsupportedParamsError"} \
        and any(k in text for k in ("response_format", "json_schema", "json_object"))


_CONFIG_ERRORS = {"AuthenticationError", "PermissionDeniedError", "NotFoundError", "UnsupportedParamsError"}


def _not_the_models(e: Exception) -> bool:
    """A failure of the configuration (arguments, credentials, model name), not of the model."""
    return isinstance(e, TypeError) or type(e).__name__ in _CONFIG_ERRORS


_OUTAGES = {"Timeout", "APITimeoutError", "APIConnectionError", "ConnectError", "ConnectTimeout", "ReadTimeout",
            "ServiceUnavailableError"}


def _outage(e: BaseException) -> bool:
    """The model did not answer at all (timeout, refused connection) — litellm sometimes wraps
    these in other types, so the whole cause chain is looked at."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if type(cur).__name__ in _OUTAGES or isinstance(cur, (TimeoutError, ConnectionError)) \
                or "Connection error" in str(cur)[:200]:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _retryable(e: Exception) -> bool:
    name = type(e).__name__
    if name in {"AuthenticationError", "BadRequestError", "NotFoundError", "PermissionDeniedError",
                "ContextWindowExceededError", "UnsupportedParamsError"}:
        return False
    return True
