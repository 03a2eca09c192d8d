"""A SentencePiece Unigram tokenizer in plain Python, for the multilingual model's 250,002 pieces.

The ``tokenizers`` library reads the same ``tokenizer.json`` and gives the same ids, but holds a
byte trie of the whole vocabulary that takes ~300 MB of memory for this vocabulary (~20 MB for the
47k-piece one); a dictionary of the pieces takes ~80 MB and loads in half the time. Segmenting a
chat message in Python costs a fraction of a millisecond (a 2,000-character one 7-20 ms, 4-10x the
library), next to ~10 ms to embed it; an embedding stops segmenting at the 512-token truncation.

It implements exactly what the bundled ``tokenizer.json`` files describe, and refuses any other:
special tokens matched in the raw text first (``<mask>`` also takes the spaces before it); each
piece of text between them normalised (control characters removed, odd spaces to " ", NFKC with
two code points shielded, runs of spaces collapsed), its spaces made "▁" with one "▁" in front,
split before every "▁"; every such word segmented by the Viterbi search of SentencePiece's
Unigram model (the best sum of piece log-probabilities; a character with no piece of its own is
unknown and scores the lowest piece's score minus 10; ties go to the first found, shorter pieces
first; adjacent unknown characters fused into one unknown token); then ``<s> ... </s>``. The test
suite compares it with ``tokenizers`` on thousands of texts, random Unicode included.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["UnigramTokenizer", "Encoding", "save_npz", "tokenizer_json"]

_UNK_PENALTY = 10.0
_SPACE = "\u2581"
#: what the tokenizers library counts as white space before a special token with ``lstrip``
#: (Rust's ``char::is_whitespace``; Python's ``str.isspace`` also has U+001C-U+001F)
_LSTRIP = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
           "\u2028\u2029\u202f\u205f\u3000")
#: code points whose NFKC (or combining class) in Python's Unicode 14 tables differs from the
#: tokenizers library's older tables (all of them added in Unicode 12.1-14: ㋿, 🅬, newer combining
#: marks...): kept as they are, as the library keeps them (computed on Python 3.11 by comparing
#: both normalisers on every assigned code point; on a Python with Unicode 15 or later, characters
#: added since may still normalise differently than in the library)
_NEWER_UNICODE = re.compile("["
                            "\u07fd\u0898-\u089f\u08ca-\u08d3\u09fe\u0c3c\u0d3b-\u0d3c\u0eba\u1715\u1abf-\u1ace\u1df6-\u1dfa"
                            "\u32ff\ua7f2-\ua7f4\ua82c\uab69\U00010781-\U00010785\U00010787-\U000107b0\U000107b2-\U000107ba"
                            "\U00010d24-\U00010d27\U00010eab-\U00010eac\U00010f46-\U00010f50\U00010f82-\U00010f85\U00011070"
                            "\U0001133b\U0001145e\U00011839-\U0001183a\U0001193d-\U0001193e\U00011943\U000119e0\U00011a34"
                            "\U00011a47\U00011a99\U00011d42\U00011d44-\U00011d45\U00011d97\U00016ff0-\U00016ff1"
                            "\U0001e130-\U0001e136\U0001e2ae\U0001e2ec-\U0001e2ef\U0001f16c\U0001fbf0-\U0001fbf9"
                            "]")


@dataclass(frozen=True)
class Encoding:
    """What the callers read of an encoding (the same attribute as ``tokenizers.Encoding``)."""

    ids: list[int]


def _normalizer(spec: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """The ``Sequence`` normalizer as steps: ("regex", compiled, content), ("string", s, content), ("nfkc",)."""
    if spec.get("type") != "Sequence":
        raise ValueError("unsupported normalizer")
    steps: list[tuple[str, Any, str]] = []
    for n in spec["normalizers"]:
        if n["type"] == "NFKC":
            steps.append(("nfkc", None, ""))
        elif n["type"] == "Replace" and "Regex" in n["pattern"]:
            steps.append(("regex", re.compile(n["pattern"]["Regex"]), n["content"]))
        elif n["type"] == "Replace" and "String" in n["pattern"]:
            steps.append(("string", n["pattern"]["String"], n["content"]))
        else:
            raise ValueError(f"unsupported normalizer step {n['type']}")
    return steps


class UnigramTokenizer:
    """Reads a ``tokenizer.json`` (or ``.json.gz``) of the shape the bundled models use, or the same
    tokenizer in its quick-loading form (``.npz``, :func:`save_npz`)."""

    def __init__(self, path: Path):
        if path.suffix == ".npz":
            spec, pieces, scores = _read_npz(path)
        else:
            data = path.read_bytes()
            spec = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
            pieces, scores = _take_vocab(spec)
        model = spec["model"]
        pre = spec["pre_tokenizer"]
        if model.get("type") != "Unigram" or model.get("byte_fallback") or pre != {
                "type": "Metaspace", "replacement": _SPACE, "prepend_scheme": "always", "split": True}:
            raise ValueError("unsupported tokenizer: a Unigram model with the Metaspace pre-tokenizer is expected")
        self._steps = _normalizer(spec["normalizer"])
        self._ids = dict(zip(pieces, range(len(pieces)), strict=True))
        self._scores = scores
        self._unk = int(model["unk_id"])
        self._unk_score = min(self._scores) - _UNK_PENALTY
        self._longest = max(map(len, pieces))
        added = spec.get("added_tokens", [])
        if any(not t.get("special") or t.get("normalized") or t.get("single_word") or t.get("rstrip") for t in added):
            raise ValueError("unsupported tokenizer: only special, unnormalised added tokens (lstrip allowed)")
        self._specials = {t["content"]: (int(t["id"]), bool(t.get("lstrip"))) for t in added}
        self._special_re = re.compile("|".join(re.escape(s) for s in sorted(self._specials, key=len, reverse=True)))
        single = spec["post_processor"]["single"]
        self._bos = self._ids[single[0]["SpecialToken"]["id"]]
        self._eos = self._ids[single[-1]["SpecialToken"]["id"]]
        trunc = spec.get("truncation") or {}
        #: the file's truncation (pieces kept between <s> and </s>): segmenting stops there, so a
        #: pasted 200 kB log costs what its first 510 pieces cost
        self._keep = int(trunc["max_length"]) - 2 if trunc.get("max_length") else None

    def get_vocab_size(self) -> int:
        return len(self._scores)

    @staticmethod
    def _nfkc(text: str) -> str:
        if _NEWER_UNICODE.search(text) is None:
            return unicodedata.normalize("NFKC", text)
        # such a character is an inert starter to the library: normalise around it
        out, pos = [], 0
        for m in _NEWER_UNICODE.finditer(text):
            out += [unicodedata.normalize("NFKC", text[pos:m.start()]), m.group()]
            pos = m.end()
        out.append(unicodedata.normalize("NFKC", text[pos:]))
        return "".join(out)

    def _normalize(self, text: str) -> str:
        for kind, pattern, content in self._steps:
            if kind == "nfkc":
                text = self._nfkc(text)
            elif kind == "regex":
                text = pattern.sub(content, text)
            else:
                text = text.replace(pattern, content)
        return text

    def _segment(self, word: str) -> list[int]:
        """Viterbi over one pre-tokenized word."""
        n = len(word)
        best: list[tuple[float, int, int] | None] = [None] * (n + 1)  # (score, start, id) ending here
        best[0] = (0.0, 0, -1)
        ids, scores = self._ids, self._scores
        for start in range(n):
            here = best[start]
            if here is None:
                continue
            base = here[0]
            single = False
            for end in range(start + 1, min(n, start + self._longest) + 1):
                pid = ids.get(word[start:end])
                if pid is None:
                    continue
                if end == start + 1:
                    single = True
                cand = base + scores[pid]
                old = best[end]
                if old is None or cand > old[0]:
                    best[end] = (cand, start, pid)
            if not single:
                cand = base + self._unk_score
                old = best[start + 1]
                if old is None or cand > old[0]:
                    best[start + 1] = (cand, start, self._unk)
        out: list[int] = []
        end = n
        while end > 0:
            node = best[end]
            assert node is not None
            if not (node[2] == self._unk and out and out[-1] == self._unk):  # fuse adjacent unknowns
                out.append(node[2])
            end = node[1]
        out.reverse()
        return out

    def _text_ids(self, text: str, out: list[int], keep: int | None) -> None:
        norm = self._normalize(text)
        if not norm:
            return
        norm = norm.replace(" ", _SPACE)
        if not norm.startswith(_SPACE):
            norm = _SPACE + norm
        for m in re.finditer(_SPACE + "[^" + _SPACE + "]*", norm):
            if keep is not None and len(out) >= keep:
                return
            out += self._segment(m.group())

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        """Ids of ``text``; with special tokens (an embedding), only as many as the file's
        truncation keeps (the same ids as the library's truncation gives)."""
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("text is not valid Unicode (a lone surrogate)") from None
        keep = self._keep if add_special_tokens else None
        ids: list[int] = []
        pos = 0
        for m in self._special_re.finditer(text) if self._specials else ():
            sid, lstrip = self._specials[m.group()]
            before = text[pos:m.start()]
            self._text_ids(before.rstrip(_LSTRIP) if lstrip else before, ids, keep)
            ids.append(sid)
            pos = m.end()
        self._text_ids(text[pos:], ids, keep)
        if keep is not None:
            ids = ids[:keep]
        return Encoding([self._bos, *ids, self._eos] if add_special_tokens else ids)

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[Encoding]:
        return [self.encode(t, add_special_tokens) for t in texts]


# The quick-loading form. Reading the 250,002-piece vocabulary as JSON (a list of [piece, score]
# pairs) costs 0.44-0.71 s of the interpreter, holding the GIL, at the first embedding of a process;
# as one NUL-joined UTF-8 string and a float64 array it is split and indexed in 0.17-0.26 s (one
# 2-core machine, beside other work: benchmarks/results/embed_speed_stop36.txt).

def _take_vocab(spec: dict[str, Any]) -> tuple[list[str], list[float]]:
    """The pieces and scores of a parsed tokenizer.json's vocabulary, taken out of it (left null,
    as the quick-loading form stores the rest; :func:`tokenizer_json` puts them back)."""
    vocab, spec["model"]["vocab"] = spec["model"]["vocab"], None
    return [piece for piece, _ in vocab], [float(score) for _, score in vocab]


def save_npz(text: str, path: Path) -> None:
    """Write a ``tokenizer.json`` text in the quick-loading form: ``spec`` (the JSON with
    ``model.vocab`` null), ``pieces`` (UTF-8, NUL between pieces) and ``scores`` (float64, exact:
    :func:`tokenizer_json` gives back the same JSON value). The same bytes every time with the same
    zlib (a fixed date and system in each member's header)."""
    spec = json.loads(text)
    pieces, scores = _take_vocab(spec)
    if not pieces or any("\0" in p for p in pieces):
        raise ValueError("a vocabulary with a NUL in a piece (or none) has no quick-loading form")
    spec_text = json.dumps(spec, ensure_ascii=False, separators=(",", ":"))
    arrays: dict[str, np.ndarray] = {"spec": np.frombuffer(spec_text.encode("utf-8"), dtype=np.uint8),
                                     "pieces": np.frombuffer("\0".join(pieces).encode("utf-8"), dtype=np.uint8),
                                     "scores": np.array(scores, dtype=np.float64)}
    with zipfile.ZipFile(path, "w") as z:
        for name, array in arrays.items():  # as np.savez_compressed writes them, but reproducibly
            buf = io.BytesIO()
            np.lib.format.write_array(buf, array, allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.create_system = 3
            z.writestr(info, buf.getvalue(), compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)


def _read_npz(path: Path) -> tuple[dict[str, Any], list[str], list[float]]:
    """The spec, pieces and scores of a quick-loading form; anything else in the file is a
    ValueError that names it (OSError when it cannot be read at all)."""
    data = path.read_bytes()
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in ("spec", "pieces", "scores")}
        if not all(isinstance(a, np.ndarray) and a.ndim == 1 for a in arrays.values()):
            raise ValueError("its members are not one-dimensional arrays")
        if [a.dtype for a in arrays.values()] != [np.uint8, np.uint8, np.float64]:
            raise ValueError("its members' types are not uint8, uint8, float64")
        spec = json.loads(arrays["spec"].tobytes().decode("utf-8"))
        pieces = arrays["pieces"].tobytes().decode("utf-8").split("\0")
        scores = arrays["scores"].tolist()
        model = spec.get("model") if isinstance(spec, dict) else None
        if not (isinstance(model, dict) and model.get("vocab", 0) is None):
            raise ValueError("its spec is not a tokenizer.json without its vocabulary")
        if len(pieces) != len(scores) or not pieces:
            raise ValueError(f"{len(pieces)} pieces against {len(scores)} scores")
    except Exception as e:  # noqa: BLE001 - zipfile (OSError too, seeking in a damaged one), zlib, numpy, json
        raise ValueError(f"{path.name}: not a tokenizer's quick-loading form ({e})") from e
    return spec, pieces, scores


def tokenizer_json(path: Path) -> str:
    """The ``tokenizer.json`` text of a tokenizer in the quick-loading form (for the ``tokenizers``
    library: the tests compare its ids with this module's)."""
    spec, pieces, scores = _read_npz(path)
    spec["model"]["vocab"] = [[p, s] for p, s in zip(pieces, scores, strict=True)]
    return json.dumps(spec, ensure_ascii=False, separators=(",", ":"))
