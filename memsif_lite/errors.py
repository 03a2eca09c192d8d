"""Every error memsif_lite raises on purpose, in one place.

MemsifError
├── MemoryFileError          the file cannot be used as a memory file
│   ├── NotAMemoryFileError  not SQLite, or SQLite that memsif_lite did not write
│   ├── SchemaVersionError   written by a newer memsif_lite (or an unknown schema)
│   ├── EmbeddingMismatchError  written with another embedding model / dimension
│   ├── EncryptedFileError   encrypted, and no key or a wrong key was given
│   └── NotEncryptedError    a key was given for a file that is not encrypted
├── InvalidInputError        bad text, timestamp, session, ids (also a ValueError)
│   └── InvalidMessageError  one message of a batch refused (its ``index`` and ``reason``)
├── ConfigError              invalid configuration values, or an optional extra that is not installed
├── ReadOnlyError            a write on a Memory opened with ``read_only=True``
├── NotFoundError            an id that does not exist (also a KeyError)
├── EmbeddingError           the embedder failed or returned bad vectors
├── LLMError                 the configured LLM failed (only raised where no fallback exists)
└── StorageError             SQLite failed underneath an open memory (the transaction was rolled back)
    ├── StorageBusyError     another process held the write lock past ``busy_timeout_ms``
    ├── StorageFullError     the disk (or ``max_page_count``) is full
    └── StorageCorruptError  the file is damaged (run ``memsif check``; restore a backup)

SQLite's own exception types (``apsw.*``) never reach a caller: they are mapped at one choke
point, :func:`memsif_lite.store.map_errors`, in the style of httpx's ``map_exceptions``.

:class:`StaleError` is not a user's error and never reaches a caller: a decision made with no
transaction open found its state changed when applied, and the worker decides again.
"""

from __future__ import annotations

__all__ = [
    "MemsifError",
    "MemoryFileError",
    "NotAMemoryFileError",
    "SchemaVersionError",
    "EmbeddingMismatchError",
    "EncryptedFileError",
    "NotEncryptedError",
    "InvalidInputError",
    "InvalidMessageError",
    "ConfigError",
    "ReadOnlyError",
    "NotFoundError",
    "EmbeddingError",
    "LLMError",
    "StorageError",
    "StorageBusyError",
    "StorageFullError",
    "StorageCorruptError",
    "StaleError",
]


class MemsifError(Exception):
    """Base class of every error raised by memsif_lite."""


class MemoryFileError(MemsifError):
    """The file cannot be opened as a memsif memory file; it was left untouched."""


class NotAMemoryFileError(MemoryFileError):
    """Not an SQLite database, or an SQLite database that memsif_lite did not create."""


class SchemaVersionError(MemoryFileError):
    """The file's schema version is newer than this code understands."""


class EmbeddingMismatchError(MemoryFileError):
    """The file was written with a different embedding model, dimension or metric."""


class EncryptedFileError(MemoryFileError):
    """The file is encrypted and no key (``key_given`` false) or a key that does not open it was
    given; it was left untouched. The message never holds the key."""

    def __init__(self, message: str, *, key_given: bool):
        super().__init__(message)
        self.key_given = key_given


class NotEncryptedError(MemoryFileError):
    """A key was given for a file that is not encrypted: it is refused rather than used
    unencrypted (encrypt it first: ``memsif encrypt`` / :func:`memsif_lite.encrypt`)."""


class InvalidInputError(MemsifError, ValueError):
    """An argument was rejected before anything was written."""


class InvalidMessageError(InvalidInputError):
    """One message of a batch was refused: ``index`` is its place in the batch, ``reason`` why."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"message {index}: {reason}")
        self.index, self.reason = index, reason


class ConfigError(MemsifError, ValueError):
    """A configuration value is out of range or inconsistent."""


class ReadOnlyError(MemsifError):
    """A write (``add``, ``forget``, ``ask``...) on a Memory opened with ``read_only=True``."""


class NotFoundError(MemsifError, KeyError):
    """An id that does not exist in this memory file."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class EmbeddingError(MemsifError):
    """The embedding model could not be loaded or produced invalid vectors."""


class LLMError(MemsifError):
    """The configured LLM failed where no offline fallback exists."""


class StorageError(MemsifError):
    """SQLite failed underneath an open memory; the write in progress was rolled back."""


class StorageBusyError(StorageError):
    """Another connection held the write lock for longer than ``Config.busy_timeout_ms``."""


class StorageFullError(StorageError):
    """The disk, or the file's ``max_page_count``, is full; nothing of the failed write was kept."""


class StorageCorruptError(StorageError):
    """The file is damaged. ``memsif check`` says where; restore from a backup."""


class StaleError(Exception):
    """The state a decision was made on changed before it could be applied (another process
    got there first, or ``forget`` changed it): discard the decision and decide again."""
