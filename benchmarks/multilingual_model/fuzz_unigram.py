"""The Python Unigram (memsif_lite/unigram.py) against the tokenizers library on random text.

    python benchmarks/multilingual_model/fuzz_unigram.py N [SEED]

N random texts of up to 30 characters, half of them drawn from every assigned Unicode code point,
half from spaces, "<mask>", U+001C and combining marks; prints the mismatches (0 expected), a few
known hard cases, truncation of a long text against the library's own, the time of a 200,000-
character text, and that a lone surrogate is refused. Run from the repository root."""
import random, sys, unicodedata, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from memsif_lite.embed import read_tokenizer
P = Path(__file__).resolve().parents[2] / "models" / "tokenizer_multi.npz"
lib = read_tokenizer(P, "tokenizers"); mine = read_tokenizer(P, "unigram")
assigned = [chr(c) for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF) and unicodedata.category(chr(c)) != "Cn"]
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 7)
bad = 0
n = int(sys.argv[1])
for i in range(n):
    t = "".join(rng.choice(assigned) if rng.random() < 0.5 else rng.choice(" a<mask>\x1c\u0301e") for _ in range(rng.randint(0, 30)))
    if mine.encode(t).ids != lib.encode(t).ids:
        bad += 1
        if bad < 5: print("DIFF", [hex(ord(c)) for c in t][:12])
print("random texts over all assigned code points:", n, "mismatches:", bad)
for c in ["a \x1c<mask>", "㋿5年", "ꟲꟳꟴ", "🅬", "cafe\u07fd\u0301"]:
    print(repr(c), mine.encode(c).ids == lib.encode(c).ids)
lib2 = read_tokenizer(P, "tokenizers")
long = "我住在北京" * 400 + " hello" * 300
from tokenizers import Tokenizer
from memsif_lite.unigram import tokenizer_json
t2 = Tokenizer.from_str(tokenizer_json(P)); t2.enable_truncation(512)
print("truncated equal:", mine.encode(long).ids == t2.encode(long).ids, len(mine.encode(long).ids))
t0 = time.perf_counter(); mine.encode("word " * 40000); print("200k chars s", round(time.perf_counter() - t0, 3))
try:
    mine.encode("a\ud800b"); print("surrogate accepted!")
except ValueError as e: print("surrogate:", e)
