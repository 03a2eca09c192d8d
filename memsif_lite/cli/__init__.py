"""The ``memsif`` command line; it mirrors the Python API (:class:`memsif_lite.Memory`) and uses
nothing else of the library but its errors and its importers.

Output
    Without ``--json`` a command prints for people: compact lines and aligned tables.
    With ``--json`` (every command but ``mcp``) it prints exactly ONE JSON document to stdout, and
    that document is always a JSON **object** — never a bare array, never JSON lines. Lists sit under a plural key
    (``"results"``, ``"facts"``, ``"active_facts"``, ``"segments"`` ...), so fields can be added
    later without breaking readers. Everything goes through one encoder (:func:`to_jsonable`):
    dataclasses become objects of their fields under their Python names (``Answer.text`` is
    ``"text"``), datetimes ISO 8601 strings, tuples and sets arrays, paths strings, non-finite
    floats ``null``.

Errors and exit codes
    0: success. 1: an error — printed to stderr as ``Error: ...`` with nothing on stdout, never a
    traceback — or ``check`` found problems (``check --json`` still prints its document).
    2: a usage error (unknown option, missing argument, bad value). ``-v`` before the command
    logs the traceback of an unexpected error at debug level.

Options
    Every command that opens a memory file takes ``--db`` (or MEMSIF_DB) — or ``--user`` /
    ``--agent`` for a file per user/agent under ``--home`` (MEMSIF_HOME) — and ``--config`` (or
    MEMSIF_CONFIG); the commands that can call an LLM (``ingest``, ``ask``) also take ``--llm``,
    ``--api-base`` and ``--api-key`` (or MEMSIF_LLM, MEMSIF_API_BASE, MEMSIF_API_KEY); so does
    ``mcp``, the MCP server. Only
    ``ingest``, ``add``, ``import``, ``import-mem0``, ``demo`` and ``mcp`` create a memory file; the other commands
    refuse a path where there is none (or an empty file), so a mistyped ``--db`` does not leave an
    empty memory file behind, and the commands that only read open the file read-only.

Untrusted text
    Stored text comes from anyone: plain output shows its control characters as escapes
    (:func:`output.printable`), and an argument that is not UTF-8 is refused by name
    (:class:`boundary.Command`).

Modules
    :mod:`.output` the one output layer (every command but ``mcp`` returns its result and
    declares its renderer with :func:`output.output`, which adds ``--json``), :mod:`.boundary` the
    one error boundary and the ``memsif`` group, :mod:`.options` the shared options and the one
    way a memory file is opened; the commands by concern: :mod:`.reading`, :mod:`.writing`,
    :mod:`.files`, :mod:`.history` (``log``, ``undo``), :mod:`.demo`, :mod:`.serve` (``mcp``, which
    serves stdio and prints no document), :mod:`.viewing` (``view``: the HTML page, written or served on
    127.0.0.1).
"""

from __future__ import annotations

from __future__ import annotations

from memsif_lite.jsonable import to_jsonable

from .boundary import main
from .demo import demo
from .fleet import fleet
from .files import backup, check, compact, decrypt, encrypt, export, import_, import_mem0, merge, rekey
from .history import log, undo
from .reading import ask, context, facts, messages, search, show, stats
from .serve import mcp
from .viewing import view
from .writing import add, forget, ingest, process

__all__ = ["main", "to_jsonable"]

for _command in (ingest, add, messages, search, process, stats, show, ask, context, facts, forget, merge, export,
                 import_, import_mem0, backup, check, compact, encrypt, decrypt, rekey, log, undo, mcp, demo, view,
                 fleet):
    main.add_command(_command)
