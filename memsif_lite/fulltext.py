"""What the full-text index (FTS5, BM25) sees of a text: scripts written without spaces made searchable.

FTS5's ``unicode61`` tokenizer splits on spaces and punctuation, so a run of Chinese or Japanese
characters (or a Korean word with its particles attached) is one token, and BM25 matches only
that exact run. :func:`index_text` rewrites every run of CJK characters (Han, kana, Hangul) as
its characters and its overlapping character pairs, each a token: ``北京很近`` becomes
``北 京 很 近 北京 京很 很近``. A question goes through the same rewrite
(:func:`memsif_lite.retrieval.fts_query`), so a word inside a longer run matches, by its pair or,
for one-character words, by the character. Other text is unchanged by that rewrite, so English
(and every script that separates words with spaces) is indexed as written.

Both sides are first composed (:func:`compose`, Unicode NFC, schema 9). Text written decomposed
(a letter + a combining mark, Hangul as separate jamo, as some systems and keyboards write it)
tokenizes differently from the composed form of the same word: decomposed Korean was indexed as
jamo pairs, a decomposed Cyrillic й as и, Greek ἄνθρωπος as α + νθρωποσ, Arabic مؤمن as مو + من,
and a decomposed question split "Zürich" into "zu" + "rich" (FTS5's own diacritic folding already
matched Latin letters on the index side).

The rewrite is what the index holds, not what the file stores: ``messages.text`` keeps the text as
written, and every write to ``message_fts`` (insert, delete) goes through :func:`index_text`,
except in the migrations that re-index old files (8 and 9, ``memsif_lite/store.py``), which delete
what an earlier schema wrote (schema 8's is :func:`cjk_grams`) before writing the new entry.
"""

from __future__ import annotations

import json
import re
import unicodedata
from importlib.resources import files

from .entities import STOP_WORDS

__all__ = ["index_text", "cjk_grams", "compose", "has_cjk", "cjk_query_terms", "without_cjk",
           "foreign_function_words", "CJK_CHAR", "QUERY_STOP_WORDS"]

#: one character of a script written without spaces between words (CJK ideographs with their
#: extensions and compatibility forms, the iteration marks 々〆〇, kana, half-width katakana, Hangul
#: syllables and jamo, bopomofo)
CJK_CHAR = ("[\u1100-\u11ff\u2e80-\u2fdf\u3005-\u3007\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
            "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]")
_RUN = re.compile(CJK_CHAR + "+")
_LATIN = re.compile("[a-zß-ɏ]")
_SPOKEN_WORD = re.compile(r"\w+(?:'\w+)*")  # "Caroline's" one word, so its "s" is no French word
_APOSTROPHES = re.compile("[’‘´`ʼ]")
_UCD = unicodedata.ucd_3_2_0


def has_cjk(text: str) -> bool:
    return _RUN.search(text) is not None


def _grams(m: re.Match[str]) -> str:
    run = m.group()
    pairs = [run[i:i + 2] for i in range(len(run) - 1)]
    return " " + " ".join([*run, *pairs]) + " "


def cjk_grams(text: str) -> str:
    """Every run of CJK characters as its characters and overlapping pairs (other text unchanged):
    what the index held of a text from schema 8, before texts were composed."""
    if _RUN.search(text) is None:
        return text
    return _RUN.sub(_grams, text)


def compose(text: str) -> str:
    """``text`` in Unicode NFC by the tables of Unicode 3.2, which every Python has and never change:
    an FTS5 entry must be deleted with the values it was indexed with, so what the index holds must
    not depend on the Python that wrote it (newer tables compose a few newer scripts' marks; every
    character of Unicode 3.2 — Latin, Greek, Cyrillic, Arabic, Hangul, … — composes the same).
    ASCII is returned as it is (composed under every table): those old tables have no quick check,
    so normalising costs ~7 µs for a 200-character ASCII message against ~0.04 µs for the test."""
    return text if text.isascii() else _UCD.normalize("NFC", text)


def index_text(text: str) -> str:
    """``text`` as the full-text index holds it: :func:`compose`, then :func:`cjk_grams` (unchanged
    unless it has CJK characters or is written decomposed)."""
    return cjk_grams(compose(text))


#: function and question words of the languages besides English whose words are separated by
#: spaces, dropped from BM25 queries as the English stop words are (``entities.STOP_WORDS``): in a
#: question such as "¿Dónde viven mis padres?" they match most messages and drown the words that
#: matter. Each language's set is the question words below (written for this module) and the
#: language's list in ``data/query_stop_words.json`` (a published stop-word list; its source and
#: licence are in that file), so a Spanish question loses as many of its function words as an
#: English one does. Many of these words are also English words or names (son, mit, comment, mia,
#: los…): :func:`foreign_function_words` drops them only from a question written in that language.
_QUESTION_WORDS: dict[str, str] = {
    "es": """un una unos unas y o pero que qué de en por para sobre mis tus yo tú él ella nosotros vosotros
             ellos ellas me se nos le es está están estoy fue estar tengo tiene tienen he ha cómo como cuál
             cuáles cuándo cuando dónde donde quién quiénes cuánto cuántos muy más ya también este esta
             estos estas ese esa eso aquí""",
    "pt": """os as um uma uns umas e ou mas em no na nos nas do da dos das ao aos pelo pela meu minha meus
             minhas teu tua seu sua ele ela nós eles elas vocês você é são estou está estão foi ter tenho
             tem têm qual quais quando onde quem quanto quantos muito mais já também isso isto aquilo esse
             essa""",
    "fr": """le une ou mais que qui quoi de au aux en dans avec sur mes ta tes sa ses je il elle nous vous
             ils elles sont suis es était été être avoir as avons ont quel quelle quels quelles quand où
             combien très déjà aussi ce cette ces cet ça""",
    "de": """der das dem ein eine einer eines einem einen und oder aber dass zu ohne auf aus bei nach vor für
             über im vom zum zur mein meine meinen meinem meiner dein deine sein seine ihr ihre ich sie es
             wir ist sind bist waren habe hast haben wie wo wann welche welcher welches wer wen wem wieviel
             viele sehr schon auch noch nicht kein keine dieser diese dieses""",
    "it": """il gli un una e che di della dei delle da in nel nella per mio miei mie tuo tua suo sua lui noi
             voi loro è sono hai ha abbiamo hanno quale quali quando quanto quanti molto più già anche
             questo questa quello quella""",
    "ru": """и в во на с со к ко по о об от до из за у для без а но или что кто как где когда какой какая
             какие какое чем чей сколько я ты он она оно мы вы они мой моя моё мои твой твоя мне меня тебя
             тебе его её их это этот эта эти то тот та те есть был была было были быть не ни да уже очень
             ещё тоже же ли""",
    "ar": """في من على إلى عن مع هل ما ماذا متى أين كيف لماذا كم أي هو هي أنا أنت أنتم نحن هم هذا هذه ذلك
             تلك التي الذي كان كانت لا لم لن قد و أو ثم لي لك""",
}


_QUESTION_SETS = {lang: frozenset(words.split()) for lang, words in _QUESTION_WORDS.items()}


def _stop_words() -> dict[str, frozenset[str]]:
    listed = json.loads(files("memsif_lite.data").joinpath("query_stop_words.json").read_text(encoding="utf-8"))
    langs = listed["languages"]
    return {lang: _QUESTION_SETS.get(lang, frozenset()) | frozenset(langs.get(lang, []))
            for lang in sorted({*_QUESTION_SETS, *langs})}


QUERY_STOP_WORDS: dict[str, frozenset[str]] = _stop_words()


def foreign_function_words(text: str) -> frozenset[str]:
    """The function words to leave out of a question (``text``, without its CJK runs) when it is
    written in a language other than English, or nothing. Its words are taken as written, any
    apostrophe kept inside ("Caroline's"). Evidence for a language is its listed words in the
    question that are not English stop words (``entities.STOP_WORDS``) and not names (a capitalised
    word after the first: Mia, Solo, Sara…); the question is in that language when it holds at
    least two of them (one, if not written in Latin letters: it cannot be an English word) and more
    listed words than English stop words. The best supported language wins (more listed words, then
    more of its question words above; still tied: only the words their lists share), so "mes" stays
    in a Spanish question and Spanish "son" does not stop "Son or daughter?" from being English.
    Names are never left out."""
    words = _SPOKEN_WORD.findall(_APOSTROPHES.sub("'", text))
    lower = [w.lower() for w in words]
    names = {w.lower() for w in words[1:] if w[:1].isupper()}
    english_hits = len({w for w in lower if w in STOP_WORDS})
    best: list[frozenset[str]] = []
    best_score = (0, 0)
    for lang, stop in QUERY_STOP_WORDS.items():
        hits = {w for w in lower if w in stop and w not in names}
        evidence = hits - STOP_WORDS
        if len(hits) <= english_hits or not evidence:
            continue
        if len(evidence) == 1 and _LATIN.search(next(iter(evidence))):
            continue
        score = (len(hits), len(hits & _QUESTION_SETS.get(lang, frozenset())))
        if score > best_score:
            best, best_score = [stop], score
        elif score == best_score:
            best.append(stop)
    if not best:
        return frozenset()
    return frozenset.intersection(*best) - names


def cjk_query_terms(text: str) -> list[str]:
    """BM25 terms for the CJK runs of a question: every run of three or more characters as written
    (how files not yet migrated to schema 8, opened read-only, indexed it), then every pair, then
    every character (the least specific last, for a capped query)."""
    runs = _RUN.findall(text)
    whole = [r for r in runs if len(r) > 2]
    pairs = [r[i:i + 2] for r in runs for i in range(len(r) - 1)]
    chars = [c for r in runs for c in r]
    return list(dict.fromkeys(whole + pairs + chars))


def without_cjk(text: str) -> str:
    return _RUN.sub(" ", text)
