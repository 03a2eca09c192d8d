"""Key entities per message: a deterministic, offline extractor (paper §3.2's K_u).

Rules, applied to the message text (not the speaker label):

1. **Names and capitalised phrases**: runs of capitalised words, except a sentence's first word
   when it is a common word ("Hey", "The", "Yesterday"); each word of a run is an entity, and a
   run of two or more words is also kept whole ("new york").
2. **Numbers and dates**: digit groups ("2023", "10:30", "5k"), month and weekday names.
3. **Salient nouns**: other words of four or more letters that are not in the stop list of
   function words, very common verbs, adjectives and chat fillers.

Everything is lower-cased and lemmatised lightly (plural -s/-es/-ies, possessive 's). At most
``MAX_ENTITIES`` are kept, names first. Composite units (segments, trajectories) take the union.
"""

from __future__ import annotations

import re

__all__ = ["extract_entities", "jaccard", "normalise", "words_of", "STOP_WORDS", "MAX_ENTITIES"]

MAX_ENTITIES = 24

_WORD = re.compile(r"[A-Za-z\u00C0-\u024F][A-Za-z\u00C0-\u024F'’\-]*|\d+(?:[.,:/]\d+)*[a-z]{0,2}")
_SENT_END = re.compile(r"[.!?;:\n]")

STOP_WORDS = _STOP = frozenset("""
a about above after again against all almost also although always am among an and another any anybody
anyone anything anyway anywhere are aren't around as at away back be became because become been before
being below besides best better between both but by came can can't cannot could couldn't did didn't do
does doesn't doing don't done down during each either else enough even ever every everybody everyone
everything everywhere few for from further get gets getting give given gives go goes going gone got gotten
had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his
how how's however i i'd i'll i'm i've if in into is isn't it it's its itself just keep kept know known
knows last least less let let's like likely made make makes making many may maybe me might mine more most
much must my myself near need needs neither never new next no nobody none nor not nothing now of off often
oh ok okay on once one ones only onto or other others otherwise ought our ours ourselves out over own per
perhaps please put quite rather really said same say says see seem seemed seems seen several shall she
she'd she'll she's should shouldn't since so some somebody someone something sometime sometimes somewhat
somewhere soon still such sure take taken takes than that that's the their theirs them themselves then
there there's these they they'd they'll they're they've thing things think this those though through thus
till to together too took toward towards under until up upon us use used using very via want wanted wants
was wasn't way ways we we'd we'll we're we've well went were weren't what what's whatever when whenever
where wherever whether which while who who's whoever whole whom whose why will with within without won't
would wouldn't yes yet you you'd you'll you're you've your yours yourself yourselves
hey hi hello wow yeah yep nope thanks thank cool awesome great nice good glad amazing totally absolutely
definitely lol haha hmm um uh sorry bye cheers congrats congratulations welcome dear yay omg
also actually anyway especially exactly honestly literally probably seriously simply basically
able ago bit big lot lots little long much small huge true real whole kind sort
feel feels feeling felt find found look looks looking looked mean means meant tell told try tried trying
come comes coming call called ask asked asking talk talked talking thinking thought hope hoped hoping
love loved loves lovely glad happy sounds sound wonderful fantastic incredible beautiful fun super
today yesterday tomorrow tonight time times day days week weeks year years month months
""".split())

_MONTHS_DAYS = frozenset("""january february march april may june july august september october november
december monday tuesday wednesday thursday friday saturday sunday""".split())


def _lemma(w: str) -> str:
    w = w.replace("’", "'")
    if w.endswith("'s"):
        w = w[:-2]
    w = w.strip("'-")
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith(("sses", "shes", "ches", "xes")):
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is", "ous")):
        return w[:-1]
    return w


def extract_entities(text: str) -> list[str]:
    """The key entities of one message, sorted, deterministic."""
    names: list[str] = []
    others: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            names.extend(run)
            if len(run) > 1:
                names.append(" ".join(run))
            run.clear()

    sentence_start = True
    pos = 0
    for m in _WORD.finditer(text):
        if _SENT_END.search(text, pos, m.start()):
            sentence_start = True
            flush()
        pos = m.end()
        tok = m.group(0)
        low = tok.lower().replace("’", "'")
        if tok[0].isdigit():
            flush()
            others.append(low)
        elif tok[0].isupper() and low != "i" and not (sentence_start and low in _STOP):
            lem = _lemma(low)
            if lem and (len(lem) > 1):
                run.append(lem)
        else:
            flush()
            if low in _MONTHS_DAYS:
                others.append(low)
            elif len(low) >= 4 and low not in _STOP and "'" not in low:
                lem = _lemma(low)
                if lem not in _STOP and len(lem) >= 3:
                    others.append(lem)
        sentence_start = False
    flush()
    seen: dict[str, None] = {}
    for e in names + others:
        if e not in seen:
            seen[e] = None
        if len(seen) >= MAX_ENTITIES:
            break
    return sorted(seen)


def jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float:
    """|A ∩ B| / |A ∪ B|; 0 when both are empty (no shared evidence)."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def normalise(text: str) -> str:
    """Lower case, punctuation to spaces, whitespace collapsed: how statements and subjects are
    compared ("Maya's dog" == "maya s dog")."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


_ANY_WORD = re.compile(r"\w+")


def words_of(text: str) -> frozenset[str]:
    """The words of a text that can say something (case folded; function words and words of one or
    two characters left out): what ``forget`` compares to tell a forgotten message's own words
    (docs/history.md). Word forms are not merged: "lives" is not "live"."""
    return frozenset(w for w in _ANY_WORD.findall(text.casefold()) if len(w) > 2 and w not in _STOP)
