"""What the full-text index (FTS5, BM25) sees of a text: scripts written without spaces made searchable.

FTS5's ``unicode61`` tokenizer splits on spaces and punctuation, so a run of Chinese or Japanese
characters (or a Korean word with its particles attached) is one token, and BM25 matches only
that exact run. :func:`index_text` rewrites every run of CJK characters (Han, kana, Hangul) as
its characters and its overlapping character pairs, each a token: ``北京很近`` becomes
``北 京 很 近 北京 京很 很近``. A question goes through the same rewrite
(:func:`memsif_lite.retrieval.fts_query`), so a word inside a longer run matches, by its pair or,
for one-character words, by the character. Other text is returned unchanged, so English (and every
script that separates words with spaces) is indexed exactly as before.

The rewrite is what the index holds, not what the file stores: ``messages.text`` keeps the text as
written, and every write to ``message_fts`` (insert, delete, rebuild) goes through this function.
"""

from __future__ import annotations

import re

__all__ = ["index_text", "has_cjk", "CJK_CHAR", "QUERY_STOP_WORDS"]

#: one character of a script written without spaces between words (CJK ideographs with their
#: extensions and compatibility forms, kana, half-width katakana, Hangul syllables and jamo, bopomofo)
CJK_CHAR = ("[\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
            "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]")
_RUN = re.compile(CJK_CHAR + "+")


def has_cjk(text: str) -> bool:
    return _RUN.search(text) is not None


def _grams(m: re.Match[str]) -> str:
    run = m.group()
    pairs = [run[i:i + 2] for i in range(len(run) - 1)]
    return " " + " ".join([*run, *pairs]) + " "


def index_text(text: str) -> str:
    """``text`` as the full-text index holds it (unchanged unless it has CJK characters)."""
    if _RUN.search(text) is None:
        return text
    return _RUN.sub(_grams, text)


#: function and question words of the languages besides English whose words are separated by
#: spaces, dropped from BM25 queries as the English stop words are (``entities.STOP_WORDS``): in a
#: question such as "¿Dónde vivo yo?" they match most messages and drown the words that matter.
#: Words that are also English content words (son, war, die, bin, hat, come, des…) are
#: left out so that English queries are untouched.
QUERY_STOP_WORDS = frozenset("""
el la los las un una unos unas y o pero que qué de del al en por para sobre mi mis tu tus su sus
yo tú él ella nosotros vosotros ellos ellas me te se nos le les lo es está están estoy fue
estar tengo tiene tienen he ha han cómo como cuál cuáles cuándo cuando dónde donde quién quiénes
cuánto cuántos muy más ya también este esta estos estas ese esa eso aquí
os as um uma uns umas e ou mas em no na nos nas do da dos das ao aos pelo pela meu minha meus minhas
teu tua seu sua eu ele ela nós eles elas vocês você é são estou está estão foi ter tenho tem têm qual
quais quando onde quem quanto quantos muito mais já também isso isto aquilo esse essa
le les une et ou mais que qui quoi de du au aux en dans avec sans sur mes ta tes
sa ses je tu il elle nous vous ils elles est sont suis es était été être avoir ai as avons ont
quel quelle quels quelles quand où comment combien très déjà aussi ce cette ces cet ça
der das dem ein eine einer eines einem einen und oder aber dass zu von mit ohne auf aus bei nach vor
für über im ins vom zum zur mein meine meinen meinem meiner dein deine sein seine ihr ihre ich du er sie
es wir ihr ist sind bist waren habe hast haben wie wo wann welche welcher welches wer wen wem
wieviel viele sehr schon auch noch nicht kein keine dieser diese dieses
il lo gli un una uno e che chi di del della dei delle da dal in nel nella per tra su mio mia
miei mie tuo tua suo sua io lui lei noi voi loro è sono sei ho hai ha abbiamo hanno quale quali quando
dove quanto quanti molto più già anche questo questa quello quella
и в во на с со к ко по о об от до из за у для без а но или что кто как где когда какой какая какие
какое чем чей сколько я ты он она оно мы вы они мой моя моё мои твой твоя мне меня тебя тебе его её их
у это этот эта эти то тот та те есть был была было были быть не ни да уже очень ещё тоже же ли
في من على إلى عن مع هل ما ماذا متى أين كيف لماذا كم أي من هو هي أنا أنت أنتم نحن هم هذا هذه ذلك تلك
التي الذي كان كانت لا لم لن قد و أو ثم لي لك
""".split())
