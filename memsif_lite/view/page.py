"""The page itself: ``page.html`` with ``view.css``, ``view.js`` and the document inlined, under a
Content-Security-Policy that allows exactly that script and that style (by their SHA-256) and
nothing else: no network, no other script, no plugin, no form — so even markup injected into the
page could not run or send anything. Stored text only ever travels as JSON inside a
``<script type="application/json">`` block (with ``<``, ``>``, ``&``, U+2028/U+2029 and lone
surrogates escaped, so no text can end that block) and is shown through ``textContent``."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError

__all__ = ["ViewPage", "render", "embed_json", "policy", "write_page", "MARK"]

#: how every page starts: a file that does not is never replaced by a view
MARK = "<!DOCTYPE html>\n<!-- memsif view:"
_UNSAFE = re.compile("[<>&\u2028\u2029\ud800-\udfff]")
_SLOT = re.compile(r"\{\{(\w+)\}\}")


@lru_cache(maxsize=None)
def _asset(name: str) -> str:
    return resources.files("memsif_lite.view").joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def embed_json(doc: Any) -> str:
    """``doc`` as JSON that can sit inside ``<script type="application/json">``: ``<``, ``>``,
    ``&``, U+2028, U+2029 and lone surrogates as ``\\uXXXX`` escapes (the same values once parsed)."""
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def policy(*, live: bool) -> str:
    """The page's Content-Security-Policy: its own script and style only; a live page may also
    ask the server it came from whether the file changed."""
    connect = "'self'" if live else "'none'"
    return (f"default-src 'none'; script-src {_sha256(_asset('view.js'))}; style-src {_sha256(_asset('view.css'))}; "
            f"connect-src {connect}; img-src 'none'; base-uri 'none'; form-action 'none'")


def render(doc: dict[str, Any]) -> str:
    """The page of a document (:func:`memsif_lite.view.data.gather`)."""
    parts = {"csp": policy(live=doc.get("live") is not None), "css": _asset("view.css"), "js": _asset("view.js"),
             "data": embed_json(doc)}
    # one pass: what is inserted is never scanned for slots again
    return _SLOT.sub(lambda m: parts[m[1]], _asset("page.html"))


def write_page(path: Path, html: str, *, memory: Path | None = None) -> int:
    """Write ``html`` to ``path``, private to its owner (0600), through a temporary file moved into
    place when complete. An existing ``path`` is replaced only if it is a memsif view (never a link,
    never another file); the ``memory`` file's side files are refused too. Returns the bytes written."""
    data = html.encode("utf-8")
    if memory is not None and os.path.realpath(path) in {os.path.realpath(f"{memory}{side}")
                                                         for side in ("", "-wal", "-shm", "-journal")}:
        raise InvalidInputError(f"{path} is the memory file (or its side file); write the view to another file")
    if path.is_symlink():
        raise InvalidInputError(f"{path} is a symbolic link; write the view to a new file")
    if path.exists():
        if not path.is_file():
            raise InvalidInputError(f"{path} is not a file; write the view to a new file")
        with open(path, "rb") as fh:
            if fh.read(len(MARK)) != MARK.encode("ascii"):
                raise InvalidInputError(f"{path} exists and is not a memsif view; write the view to a new file "
                                        "(or remove that one)")
    if not path.parent.is_dir():
        raise InvalidInputError(f"cannot write {path}: no directory {path.parent}")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".memsif-view-", suffix=".tmp")  # 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(data)


@dataclass(frozen=True)
class ViewPage:
    """What :meth:`memsif_lite.Memory.view` made of the memory file ``source``: the page (``html``),
    the file's counts when it was read (``stats``), and where it was written (``path``, ``bytes``;
    ``None`` and 0 if not)."""

    source: Path
    html: str = field(repr=False)
    stats: dict[str, int]
    path: Path | None = None
    bytes: int = 0

    def write(self, path: str | Path) -> "ViewPage":
        """Write the page to ``path`` (:func:`write_page`)."""
        dest = Path(path)
        return dataclasses.replace(self, path=dest, bytes=write_page(dest, self.html, memory=self.source))
