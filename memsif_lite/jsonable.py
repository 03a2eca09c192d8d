"""Plain JSON values for library objects: the one encoder behind the CLI's ``--json`` and the
MCP server's structured results."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

__all__ = ["to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """The one encoder behind every ``--json``: plain JSON values for library objects."""
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [to_jsonable(v) for v in sorted(obj, key=repr)]
    if isinstance(obj, (dt.datetime, dt.date, dt.time)):
        return obj.isoformat()
    if isinstance(obj, PurePath):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return to_jsonable(obj.tolist())
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")
