#!/usr/bin/env python3
"""An offline text sample for vocabulary pruning/evaluation: the translated messages (msgstr) of
the gettext catalogues (.mo) that Debian packages install under /usr/share/locale, and their
English msgids. Software UI text, not conversation: a weak but real signal of which pieces
text in each script needs. Files are split by a hash of their path into 'fit' / 'heldout'."""
import gettext
import hashlib
import json
import re
import sys
from pathlib import Path

LANGS = ["zh_CN", "zh_TW", "ja", "ko", "es", "de", "ru", "ar", "pt", "pt_BR", "fr", "it"]
FMT = re.compile(r"%[-+ #0-9.*]*[a-zA-Z]|\{[^}]*\}|&|_(?=\w)")


def messages(path):
    try:
        with open(path, "rb") as fh:
            t = gettext.GNUTranslations(fh)
    except Exception:
        return []
    out = []
    for k, v in t._catalog.items():
        if not k or not isinstance(v, str):
            continue
        kid = k[0] if isinstance(k, tuple) else k
        for s, lang_src in ((v, "x"), (kid, "en")):
            s = FMT.sub(" ", s).strip()
            if 4 <= len(s) <= 400:
                out.append((lang_src, s))
    return out


def main(outdir):
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    split = {"fit": {}, "heldout": {}}
    for lang in LANGS:
        for mo in sorted(Path("/usr/share/locale", lang, "LC_MESSAGES").glob("*.mo")):
            part = "fit" if int(hashlib.sha1(mo.name.encode()).hexdigest(), 16) % 4 else "heldout"
            for src, s in messages(mo):
                key = "en" if src == "en" else lang
                split[part].setdefault(key, set()).add(s)
    for part, d in split.items():
        d = {k: sorted(v) for k, v in d.items()}
        (out / f"mo_{part}.json").write_text(json.dumps(d, ensure_ascii=False))
        print(part, {k: len(v) for k, v in d.items()})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "corpus")
