"""Issue 23.9: the English + Portuguese model's tokenizer (the budgets' token counter) in plain
Python (memsif_lite.unigram) gives the tokenizers library's ids, pieces and character offsets,
so the counts of memsif_lite.tokens are the same with either."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES

pytest.importorskip("tokenizers", reason="compared with the tokenizers library (the test extra)")


def _count(enc) -> int:  # memsif_lite.tokens' rule: an unknown run counts its characters
    return len(enc.ids) + sum(b - a - 1 for i, (a, b) in zip(enc.ids, enc.offsets, strict=True) if i == 3 and b - a > 1)


@pytest.fixture(scope="module")
def both():
    from memsif_lite.embed import default_model_dir, read_tokenizer

    path = default_model_dir() / "tokenizer_enpt.json.gz"
    return read_tokenizer(path, "unigram"), read_tokenizer(path, "tokenizers")


def _same(both, text: str) -> None:
    mine, lib = both
    for special in (False, True):
        a, b = mine.encode(text, add_special_tokens=special), lib.encode(text, add_special_tokens=special)
        if special and len(b.ids) > 512:
            continue  # the library here is untruncated; the embedder truncates both the same way
        assert (a.ids, a.tokens, a.offsets) == (b.ids, b.tokens, b.offsets), text
        assert _count(a) == _count(b), text


def test_the_same_encodings_on_edge_cases_and_ten_languages(both):
    langs = json.loads((FIXTURES / "multilingual.json").read_text(encoding="utf-8"))["languages"].values()
    texts = [t for lang in langs for t in lang["memories"] + lang["questions"] + lang["distractors"]]
    texts += ["", " ", "a  b", "  中", "中  ", "\x01中", "中\x01文", "a\tb\nc", "<mask>中 a</s>b", "ﬁ\u05b5",
              "N\u0323\u0301", "a\u0301\u0323", "\u0419\x02\u0652", "\u037a\u034d\u030c", "x ㈱中", "⒔\u0334",
              "\u1100\u1161\u11a8中", "e\u0301x 中\u0301", "🥳🥳 party", "\u2581x", "㋿5年", "ﷶ and ﷺ", "ﹼ\u0344"]
    assert all(_same(both, t) is None for t in texts)
    assert both[0].get_added_tokens_decoder()[47283].content == "<mask>"


@settings(max_examples=400)
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40))
def test_the_same_encodings_on_any_text(both, text):
    _same(both, text)


@settings(max_examples=300)
@given(st.lists(st.sampled_from([chr(c) for c in [*range(0x20, 0x250), *range(0x300, 0x370), 0x37a, 0x344, 0x345,
                                                  *range(0x591, 0x5c8), *range(0x610, 0x660), *range(0x1100, 0x1180),
                                                  *range(0x11a8, 0x11c3), *range(0xac00, 0xac10), 0xfb01, 0xfdf6,
                                                  0xfe7c, 0x2494, 0x3231, 0x4e2d, 1, 2, 9, 10, 0x200b, 0xa0, 0x3000]]
                                 + ["<mask>", "</s>", "  "]), max_size=40).map("".join))
def test_the_same_encodings_where_normalisation_moves_characters(both, text):
    """Marks reordered and composed, compatibility characters expanded, controls removed, spaces
    collapsed: the offsets follow the library's alignment through each."""
    _same(both, text)
