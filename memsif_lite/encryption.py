"""Encrypting a memory file at rest, in place: ``encrypt``, ``decrypt`` and ``rekey`` (``memsif
encrypt`` / ``decrypt`` / ``rekey``).

The whole file is encrypted by SQLite3 Multiple Ciphers (ChaCha20-Poly1305 per page, the key
derived from a passphrase or key bytes with PBKDF2-SHA256 and the file's own salt): messages,
vectors, the full-text index, facts, history, the work queue, tombstones, and the ``-wal`` beside it;
temporary tables stay in memory. ``Memory(path, key=...)`` opens such a file (and creates a new
file encrypted); without its key, or with a wrong one, it is an
:class:`~memsif_lite.errors.EncryptedFileError` before anything is written, and a key for a file
that is not encrypted a :class:`~memsif_lite.errors.NotEncryptedError`.

Each function here converts a closed file (no other program may have it open) through a new file
written beside it, verified and then renamed over it (:func:`memsif_lite.store.convert`): a crash
at any moment leaves the file as it was, or converted. The key is never written anywhere.
"""

from __future__ import annotations

from pathlib import Path

from . import store
from .errors import EncryptedFileError, InvalidInputError, MemoryFileError
from .keys import Key, KeyLike, as_key

__all__ = ["encrypt", "decrypt", "rekey"]


def encrypt(path: str | Path, key: KeyLike) -> None:
    """Encrypt the plain memory file ``path`` with ``key`` (a passphrase or key bytes)."""
    new = _required(key, "key")
    store.require_cipher()
    try:
        store.convert(path, key=None, new_key=new)
    except EncryptedFileError as e:
        if e.key_given:
            raise
        raise MemoryFileError(f"{path} is encrypted already (change its key with `memsif rekey`)") from None
    finally:
        new.wipe()


def decrypt(path: str | Path, key: KeyLike) -> None:
    """Decrypt the memory file ``path``, which ``key`` opens, into a plain one."""
    old = _required(key, "key")
    store.require_cipher()
    try:
        store.convert(path, key=old, new_key=None)
    finally:
        old.wipe()


def rekey(path: str | Path, key: KeyLike, new_key: KeyLike) -> None:
    """Change the key of the encrypted memory file ``path`` from ``key`` to ``new_key``."""
    old, new = _required(key, "key"), _required(new_key, "new key")
    try:
        if old.same_as(new):
            raise InvalidInputError("the new key is the key the file has")
        store.require_cipher()
        store.convert(path, key=old, new_key=new)
    finally:
        old.wipe()
        new.wipe()


def _required(value: KeyLike | None, what: str) -> Key:
    key = as_key(value, what)
    if key is None:
        raise InvalidInputError(f"give the {what}")
    return key
