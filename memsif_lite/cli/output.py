"""The command line's one output layer: a command returns its result (a dict of library objects)
and declares, with :func:`output`, how people read it (a renderer: the result to lines); ``--json``
prints the result itself through the one encoder instead. No command prints its data any other way."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import click

from memsif_lite.jsonable import to_jsonable

__all__ = ["Heading", "clip", "day", "echo", "emit", "fields_of", "id_list", "local", "minutes", "one_line", "output",
           "plural", "printable", "stats_line", "stats_lines", "table"]

# What a terminal would act on instead of showing: C0 controls but newline and tab (ESC starts a
# sequence that clears the screen or sets the window title; BEL, CR...), DEL, C1 controls (0x9b is
# a CSI on its own) and the bidirectional overrides that reorder what is shown.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_JSON_RAW = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what json.dumps leaves raw of _UNSAFE

#: A renderer: the command's result and its arguments (by name) to the lines people read.
Renderer = Callable[..., Iterable[str]]


class Heading(str):
    """A line a renderer wants printed in bold."""


def printable(text: str) -> str:
    """``text`` with every terminal-active character shown as its escape (ESC as ``\\x1b``): stored
    text comes from anyone, and must not drive the terminal of whoever lists it."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def echo(text: str = "", **kwargs: Any) -> None:
    """Every line of plain output goes through here (and so through :func:`printable`)."""
    if isinstance(text, Heading):
        kwargs.setdefault("bold", True)
    click.secho(printable(text), **kwargs)


def emit(doc: Mapping[str, Any]) -> None:
    """One JSON document. JSON escapes C0 controls itself, :data:`_JSON_RAW` is escaped here
    (``\\u009b``: the same value, and only strings can hold such characters)."""
    text = json.dumps(to_jsonable(doc), ensure_ascii=False)
    click.echo(_JSON_RAW.sub(lambda m: f"\\u{ord(m[0]):04x}", text))


def output(render: Renderer, *, failed: Callable[[Any], bool] | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Adds ``--json`` to a command that returns its result: with it the result is printed as one
    JSON object (:func:`emit`), else ``render(result, **arguments)`` line by line (:func:`echo`).
    ``failed(result)`` true: exit 1 once it is printed (``check``)."""

    def decorate(f: Callable[..., Any]) -> Any:
        @functools.wraps(f)
        def wrapper(*args: Any, as_json: bool, **kwargs: Any) -> None:
            result = f(*args, **kwargs)
            if as_json:
                emit(result)
            else:
                for line in render(result, **kwargs):
                    echo(line)
            if failed is not None and failed(result):
                sys.exit(1)

        return click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")(wrapper)

    return decorate


def fields_of(obj: Any) -> dict[str, Any]:
    """A dataclass's fields by name, values as they are (encoded when printed)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[int] = ()) -> list[str]:
    """Aligned columns; columns in ``right`` are right-aligned, the last column is never padded."""
    cells = [[printable(str(c)) for c in headers]] + [[printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            .rstrip() for r in cells]


# -- the pieces renderers make lines of --------------------------------------------------------------
def plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def minutes(d: Any) -> str:
    return d.isoformat(sep=" ", timespec="minutes") if d is not None else ""


def day(d: Any) -> str:
    return f"{d:%Y-%m-%d}" if d is not None else ""


def id_list(message_ids: Sequence[int]) -> str:
    return ",".join(map(str, message_ids))


def one_line(text: str) -> str:
    return " ".join(text.split())


def clip(text: str, width: int = 110) -> str:
    line = one_line(text)
    return line if len(line) <= width else line[: width - 1] + "…"


def local(m: Any) -> str:
    """A message's time as its caller gave it: ``2024-05-06 00:30+02:00`` (``... UTC`` if unknown)."""
    if m.utc_offset_min is None:
        return f"{minutes(m.at)} UTC"
    return m.local_at.isoformat(sep=" ", timespec="minutes")


def stats_line(st: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in st.items())


def stats_lines(st: Mapping[str, int], indent: str = "") -> list[str]:
    width = max((len(k) for k in st), default=0)
    return [f"{indent}{k:{width}}  {v}" for k, v in st.items()]
