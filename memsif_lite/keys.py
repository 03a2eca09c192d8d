"""Encryption keys: what ``Memory(path, key=...)`` and ``merge_from(..., key=...)`` accept, held so that
they are never printed, logged or written.

A key is a passphrase (``str``, used as its UTF-8 bytes) or raw key bytes; either way SQLite3
Multiple Ciphers derives the page key from it and the file's own salt (ChaCha20-Poly1305, the
``chacha20`` cipher, PBKDF2-SHA256). A :class:`Key` keeps its bytes in a ``bytearray`` that
:meth:`Key.wipe` overwrites when the memory that needed it is closed; its ``repr`` shows nothing.
"""

from __future__ import annotations

from typing import Union

from .errors import InvalidInputError

__all__ = ["Key", "KeyLike", "as_key"]

#: what the API accepts as a key
KeyLike = Union[str, bytes, bytearray, "Key"]

#: the longest key accepted (a passphrase or key bytes; SQLite3 Multiple Ciphers hashes it anyway)
MAX_KEY_BYTES = 4096


class Key:
    """An encryption key in memory. ``str(key)`` and ``repr(key)`` never show it."""

    __slots__ = ("_secret",)

    def __init__(self, secret: str | bytes | bytearray):
        raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        self._secret = bytearray(raw)

    def sql_hex(self) -> str:
        """The key as hex digits, for ``PRAGMA hexkey`` and ``hexkey=`` URI parameters only."""
        if not self._secret:
            raise InvalidInputError("this key was wiped (its Memory is closed)")
        return self._secret.hex()

    def same_as(self, other: "Key | None") -> bool:
        return other is not None and bytes(self._secret) == bytes(other._secret)

    def wipe(self) -> None:
        """Overwrite the key's bytes (the caller's own ``str`` or ``bytes`` is theirs to drop)."""
        for i in range(len(self._secret)):
            self._secret[i] = 0
        self._secret = bytearray()

    def __repr__(self) -> str:
        return "Key(<hidden>)"

    __str__ = __repr__

    def __reduce__(self):  # never pickled (into a queue, a cache, another process)
        raise TypeError("an encryption key cannot be pickled")


def as_key(value: object, what: str = "key") -> Key | None:
    """``None``, or a fresh :class:`Key` from a passphrase or key bytes; an empty, oversized or
    unsupported value is an :class:`InvalidInputError` that never quotes it."""
    if value is None:
        return None
    if isinstance(value, Key):
        if not value._secret:
            raise InvalidInputError(f"this {what} was wiped (its Memory is closed)")
        value = bytes(value._secret)
    if isinstance(value, str):
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError(f"the {what} is not valid Unicode text (a lone surrogate)") from None
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
    else:
        raise InvalidInputError(f"the {what} must be a passphrase (str) or key bytes, not {type(value).__name__}")
    if not raw:
        raise InvalidInputError(f"the {what} is empty")
    if len(raw) > MAX_KEY_BYTES:
        raise InvalidInputError(f"the {what} is longer than {MAX_KEY_BYTES} bytes")
    return Key(raw)
