"""Memories kept apart: one file per user / agent under a memory home directory.

Layout (names are lower-cased, so one name means one file on every file system)::

    <home>/users/<user>.db              open_memory(user="alice")
    <home>/users/<user>/<agent>.db      open_memory(user="alice", agent="coder")
    <home>/agents/<agent>.db            open_memory(agent="coder")

Separate files share nothing — segments, trajectories, facts, clusters — and shard naturally.
The home is ``home=``, else ``$MEMSIF_HOME``, else the platform's user data directory
(``$XDG_DATA_HOME/memsif`` or ``~/.local/share/memsif``; ``~/Library/Application Support/memsif``
on macOS; ``%APPDATA%\\memsif`` on Windows).

A name is 1-64 characters of ASCII letters, digits and ``. _ - @ +``, starts with a letter or
digit, does not end with a dot, and is not a name Windows reserves (``CON``, ``NUL``, ``COM1``...,
also with an extension): so no ``..``, no separators, no absolute path and no NUL can get in, and
every accepted name is a plain file name inside the home.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from .errors import InvalidInputError, MemoryFileError
from .memory import Memory

__all__ = ["default_home", "validate_name", "memory_path", "open_memory", "OpenMemories", "make_private_dirs"]

MAX_NAME = 64
_NAME = re.compile(r"[a-z0-9][a-z0-9._@+-]*")
_RESERVED = frozenset({"con", "prn", "aux", "nul", "conin$", "conout$", "clock$"}
                      | {f"{p}{i}" for p in ("com", "lpt") for i in range(10)})


def default_home() -> Path:
    """``$MEMSIF_HOME``, else the platform's user data directory for memsif."""
    env = os.environ.get("MEMSIF_HOME")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("APPDATA") or str(Path.home() / "AppData" / "Roaming")
        return Path(base) / "memsif"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "memsif"
    xdg = os.environ.get("XDG_DATA_HOME")
    base_dir = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base_dir / "memsif"


def validate_name(name: Any, what: str = "user") -> str:
    """The name as it is used in the file name (lower case), or InvalidInputError."""
    if not isinstance(name, str):
        raise InvalidInputError(f"{what} must be a string, not {type(name).__name__}")
    folded = name.lower() if name.isascii() else ""  # non-ASCII could fold to ASCII (the Kelvin sign to k)
    if not 1 <= len(name) <= MAX_NAME or not _NAME.fullmatch(folded):
        raise InvalidInputError(
            f"{what} name {name!r} is not allowed: use 1-{MAX_NAME} ASCII letters, digits and . _ - @ +, "
            "starting with a letter or digit")
    if folded.endswith("."):
        raise InvalidInputError(f"{what} name {name!r} is not allowed: it ends with a dot")
    if folded.split(".")[0] in _RESERVED:
        raise InvalidInputError(f"{what} name {name!r} is not allowed: Windows reserves it for a device")
    return folded


def memory_path(user: str | None = None, agent: str | None = None, *, home: str | Path | None = None) -> Path:
    """The file of ``user`` and/or ``agent`` under ``home`` (see the module docstring); nothing is
    created. A symlink inside the home (the file or a directory on its way) is refused with
    MemoryFileError: a link ``users/eve.db -> bob.db`` would hand eve bob's memory."""
    if user is None and agent is None:
        raise InvalidInputError("give a user, an agent or both")
    root = Path(home).expanduser() if home is not None else default_home()
    if user is None:
        parts = ["agents", f"{validate_name(agent, 'agent')}.db"]
    elif agent is None:
        parts = ["users", f"{validate_name(user, 'user')}.db"]
    else:
        parts = ["users", validate_name(user, "user"), f"{validate_name(agent, 'agent')}.db"]
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise MemoryFileError(f"{path} is a symbolic link: memory files under a memory home must be plain "
                                  "files (remove the link)")
    return path


def open_memory(user: str | None = None, agent: str | None = None, *, home: str | Path | None = None,
                **memory_kwargs: Any) -> Memory:
    """``Memory`` on the file of ``user`` and/or ``agent`` (created with its directories, private to
    the current user, unless ``read_only=True``); ``memory_kwargs`` go to :class:`Memory`."""
    path = memory_path(user, agent, home=home)
    if not memory_kwargs.get("read_only"):
        make_private_dirs(path.parent)
    return Memory(path, **memory_kwargs)


class OpenMemories:
    """The memories of one home that an adapter serving many users has opened, one ``Memory`` per
    file, kept open until :meth:`close` (``memory_kwargs`` go to each, as to :func:`open_memory`)."""

    def __init__(self, home: Path, **memory_kwargs: Any):
        self.home, self._kwargs = home, memory_kwargs
        self._open: dict[Path, Memory] = {}
        self._lock = threading.Lock()

    def get(self, user: str | None, agent: str | None, *, create: bool) -> Memory | None:
        """The open memory of ``user`` / ``agent``; None when its file does not exist and ``create``
        is false (nothing is created then)."""
        path = memory_path(user, agent, home=self.home)
        with self._lock:
            mem = self._open.get(path)
            if mem is None:
                if not create and not path.exists():
                    return None
                mem = self._open[path] = open_memory(user, agent, home=self.home, **self._kwargs)
            return mem

    def close(self) -> None:
        """Close every memory opened here."""
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for mem in opened:
            mem.close()


def make_private_dirs(directory: Path) -> None:
    """``mkdir -p`` where every directory created is readable by its owner only."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)
