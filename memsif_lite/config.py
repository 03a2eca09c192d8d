"""Configuration: one frozen dataclass, validated up front (nothing is written with a bad config)."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError

__all__ = ["Config", "FactType", "DEFAULT_FACT_SCHEMA"]


@dataclass(frozen=True)
class FactType:
    """One CoreFact type of the schema (paper §3.3, Appendix C.1)."""

    name: str
    description: str


DEFAULT_FACT_SCHEMA: tuple[FactType, ...] = (
    FactType("Identity", "static attributes of a person: name, occupation, location, age, background"),
    FactType("Event", "time-anchored occurrences: trips, achievements, milestones, things done on a date"),
    FactType("Preference", "subjective attitudes: likes, dislikes, favourites, goals, values"),
    FactType("Relation", "social ties: family, friends, partners, colleagues, pets"),
)


@dataclass(frozen=True)
class Config:
    """All tunables of a memory. Defaults follow the MemSIF paper (Appendix C.1).

    ``sem_low``/``sem_high`` rescale the embedder's raw cosine into the paper's normalised
    semantic score: ``s_sem = clip((cos - sem_low) / (sem_high - sem_low), 0, 1)``. ``None``
    takes the levels calibrated for the embedding model (see benchmarks/calibrate.py).
    """

    alpha_segment: float = 0.8
    alpha_trajectory: float = 0.8
    tau_merge: float = 0.60
    tau_split: float = 0.325
    top_k: int = 3
    theta_s: float = 0.45
    theta_q: float = 0.45
    sem_low: float | None = None
    sem_high: float | None = None
    trajectory_threshold: float = 0.6
    #: query pipeline: how much a message's Topical Segment / Event Trajectory rank adds to its
    #: own (0 leaves that level out of retrieval; chosen on the LoCoMo development half)
    segment_weight: float = 0.2
    trajectory_weight: float = 0.05
    #: episodes (memsif_lite.episodes): a Topical Segment ends at a session change or a gap of more
    #: than ``segment_gap_s`` seconds; the same speaker's next message within ``burst_s`` seconds
    #: joins the open segment (0: judged by φ like any message). Chosen on held-out splits of the
    #: LoCoMo development half and its chat-style variant (benchmarks/README.md, "Episodes")
    segment_gap_s: float = 3600.0
    burst_s: float = 30.0
    embedding_model: str | None = None
    synchronous: str = "FULL"
    busy_timeout_ms: int = 10_000
    llm_timeout_s: float = 30.0
    llm_retries: int = 2
    #: a model that times out or refuses connections this many times in a row is treated as down
    #: for ``llm_backoff_s`` (doubling while it stays down, up to 10 minutes)
    llm_down_after: int = 3
    llm_backoff_s: float = 30.0
    #: how replies are constrained: ``auto`` (a JSON schema the way the server takes it, stepping
    #: down when refused), ``json_schema`` (OpenAI, vLLM), ``json_object_schema`` (llama.cpp's
    #: server), ``json_object`` (plain JSON mode)
    llm_schema: str = "auto"
    #: LLM requests in flight at once for independent steps (different segments' titles and
    #: CoreFact extraction); vLLM and llama.cpp servers with several slots answer them faster
    llm_concurrency: int = 1
    max_message_chars: int = 1_000_000
    fact_schema: tuple[FactType, ...] = field(default=DEFAULT_FACT_SCHEMA)

    def __post_init__(self) -> None:
        for name in ("alpha_segment", "alpha_trajectory", "tau_merge", "tau_split", "theta_s",
                     "theta_q", "trajectory_threshold", "segment_weight", "trajectory_weight"):
            _unit(name, getattr(self, name))
        for name in ("theta_s", "theta_q"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be above 0 (a single source or query must never promote)")
        if self.tau_split >= self.tau_merge:
            raise ConfigError(f"tau_split ({self.tau_split}) must be below tau_merge ({self.tau_merge})")
        if (self.sem_low is None) != (self.sem_high is None):
            raise ConfigError("set both sem_low and sem_high, or neither")
        if self.sem_low is not None:
            _unit("sem_low", self.sem_low, lo=-1.0)
            _unit("sem_high", self.sem_high, lo=-1.0)
            if self.sem_low >= self.sem_high:  # type: ignore[operator]
                raise ConfigError("sem_low must be below sem_high")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or not 1 <= self.top_k <= 100:
            raise ConfigError(f"top_k must be an integer in [1, 100], got {self.top_k!r}")
        if isinstance(self.segment_gap_s, bool) or not isinstance(self.segment_gap_s, (int, float)) \
                or not 0 < self.segment_gap_s <= 10 * 365 * 86400:
            raise ConfigError("segment_gap_s must be a number of seconds in (0, 10 years]")
        if isinstance(self.burst_s, bool) or not isinstance(self.burst_s, (int, float)) \
                or not 0 <= self.burst_s <= min(self.segment_gap_s, 3600):
            raise ConfigError("burst_s must be a number of seconds in [0, min(segment_gap_s, 3600)]")
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {self.synchronous!r}")
        if not isinstance(self.busy_timeout_ms, int) or self.busy_timeout_ms < 0:
            raise ConfigError("busy_timeout_ms must be a non-negative integer")
        if not (isinstance(self.llm_timeout_s, (int, float)) and 0 < self.llm_timeout_s <= 3600):
            raise ConfigError("llm_timeout_s must be in (0, 3600]")
        if not isinstance(self.llm_retries, int) or not 0 <= self.llm_retries <= 10:
            raise ConfigError("llm_retries must be an integer in [0, 10]")
        if isinstance(self.llm_down_after, bool) or not isinstance(self.llm_down_after, int) \
                or not 1 <= self.llm_down_after <= 100:
            raise ConfigError("llm_down_after must be an integer in [1, 100]")
        if not (isinstance(self.llm_backoff_s, (int, float)) and 0 < self.llm_backoff_s <= 3600):
            raise ConfigError("llm_backoff_s must be in (0, 3600]")
        if isinstance(self.llm_concurrency, bool) or not isinstance(self.llm_concurrency, int) \
                or not 1 <= self.llm_concurrency <= 32:
            raise ConfigError("llm_concurrency must be an integer in [1, 32]")
        if self.llm_schema not in ("auto", "json_schema", "json_object_schema", "json_object"):
            raise ConfigError("llm_schema must be auto, json_schema, json_object_schema or json_object")
        if not isinstance(self.max_message_chars, int) or self.max_message_chars < 1:
            raise ConfigError("max_message_chars must be a positive integer")
        schema = tuple(self.fact_schema)
        if not schema or not all(isinstance(t, FactType) and t.name.strip() for t in schema):
            raise ConfigError("fact_schema must be a non-empty sequence of FactType with names")
        if len({t.name.lower() for t in schema}) != len(schema):
            raise ConfigError("fact_schema has duplicate type names")
        object.__setattr__(self, "fact_schema", schema)

    @classmethod
    def from_file(cls, path: str | Path) -> "Config":
        """Load from a JSON or TOML file whose keys are Config fields.

        ``fact_schema`` is a list of ``{"name", "description"}`` objects.
        """
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise ConfigError(f"cannot read config file {p}: {e}") from e
        try:
            if p.suffix.lower() == ".toml":
                import tomllib

                data = tomllib.loads(raw.decode("utf-8"))
            else:
                data = json.loads(raw)
        except Exception as e:  # noqa: BLE001 - any parse error is a config error
            raise ConfigError(f"cannot parse config file {p}: {e}") from e
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Config":
        if not isinstance(data, Mapping):
            raise ConfigError("config must be a mapping")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown config keys: {', '.join(sorted(unknown))}")
        kwargs = dict(data)
        if "fact_schema" in kwargs:
            try:
                kwargs["fact_schema"] = tuple(
                    FactType(str(t["name"]), str(t.get("description", ""))) for t in kwargs["fact_schema"]
                )
            except (TypeError, KeyError, AttributeError) as e:
                raise ConfigError("fact_schema entries need a 'name'") from e
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise ConfigError(str(e)) from e


def _unit(name: str, value: Any, lo: float = 0.0) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if not lo <= value <= 1.0:
        raise ConfigError(f"{name} must be in [{lo:g}, 1], got {value!r}")
