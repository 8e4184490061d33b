"""Adversarial variants of the labelled injection set (issue 21, item 7).

    python bench/injection_variants.py          # (re)writes tests/data/injection_variants.jsonl

Deterministic (seeded per source row and transform).  Each variant row keeps its
source row's ``kind`` and ``split`` (so tuning on ``dev`` never sees a ``test``
variant) and adds ``variant`` (``quoted`` / ``cased`` / ``split``), ``transform``
(the exact transform) and ``source`` (the line number of the source row in
``injection.jsonl``, 0-based).  The original rows are not touched.

Injected rows: the payload span (the sentences that are not shared carrier prose,
see :func:`payload_span`) is quoted in place in each quote style and once inside a
neutral title/sign frame (``"…" is the closing track …``), re-cased (UPPER, Title,
aLtErNaTiNg), or split (line breaks, extra whitespace, zero-width / soft-hyphen
characters inside words, punctuation between words).  All keep label 1: quotation,
casing and splitting do not change who the imperative is addressed to.

Clean rows: one sentence quoted (two random styles), the whole text re-cased (all
three casings), one sentence split (two random splits).  All keep label 0.

Mentions (``kind`` = ``mention``, label 0): the payload of an injected row quoted
inside security-article framing ("the phrase '…' is a textbook example of prompt
injection").  The data's convention (``hard_security`` / ``hard_ml`` rows: articles
that describe attacks, DAN, "role-play jailbreaks", are clean) makes a quoted attack
in a discussion of attacks clean.  The ``dev`` and ``test`` splits use disjoint frame
sentences, so a rule tuned on the dev frames is measured on other wording.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "injection.jsonl"
TARGET = ROOT / "tests" / "data" / "injection_variants.jsonl"
SEED = 21

# Injected kinds whose payload is natural-language prose; markup and already
# obfuscated kinds (role tags, delimiters, hidden markup, base64, leetspeak …) are
# left out: quoting or re-casing a ``<|im_start|>`` token says nothing about mentions.
PROSE_KINDS = frozenset({"override", "prompt_leak", "secret_exfil", "addressed_ai", "concealment",
                         "jailbreak", "multilingual", "tool_coercion", "subtle"})

QUOTES = {"straight": ('"', '"'), "curly": ("\u201c", "\u201d"), "single": ("'", "'"),
          "curly_single": ("\u2018", "\u2019"), "guillemets": ("\u00ab", "\u00bb"),
          "backticks": ("`", "`")}

# Neutral frames around a quoted imperative: nothing in them says "this is an example
# of an attack", so the quoted span is still text an LLM reader is addressed by.
TITLE_FRAMES = {
    "dev": ["{q} is the closing track on the band's second album.",
            "The poster taped to the door just said {q}",
            "{q}, she wrote across the top of the page."],
    "test": ["{q} is the title of the opening chapter.",
             "Track 7: {q}",
             "The banner across the homepage read {q}"],
}
MENTION_FRAMES = {
    "dev": [("Security researchers often cite the phrase {q} as a textbook example of prompt "
            "injection."),
            ("A classic prompt-injection payload reads {q}; filters that look for it are easy to "
            "evade."),
            "Attackers hide strings such as {q} in web pages that an assistant later summarises.",
            ("The red-team report lists {q} among the attack prompts that still worked against "
            "older models.")],
    "test": ["One of the injection attempts we logged was {q}, planted in a product review.",
             "Blocklists catch the wording {q}, but paraphrases slip through.",
             "The paper shows how a jailbreak like {q} can be hidden in white text on a web page.",
             "Our detector flags known attack strings, for example {q}."],
}

SPLITS = ("newline", "whitespace", "invisible", "punct")
CASINGS = ("upper", "title", "alternating")
PUNCT_SEPS = (".", "-", "/", "*", "|", "_", " . ", " - ", "...", " / ")
INVISIBLES = ("\u200b", "\u200c", "\u2060", "\u00ad")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\u00c0-\u00dd])")


def load(path: Path = SOURCE) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence."""
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return spans


def carriers(rows: list[dict]) -> set[str]:
    """Sentences of clean prose that injected rows were built around: any sentence of a
    clean row, and any sentence that occurs in two or more rows."""
    seen: Counter[str] = Counter()
    out: set[str] = set()
    for r in rows:
        parts = {r["text"][a:b] for a, b in sentences(r["text"])}
        seen.update(parts)
        if r["label"] == 0:
            out |= parts
    return out | {s for s, n in seen.items() if n >= 2}


def payload_span(text: str, carrier: set[str]) -> tuple[int, int]:
    """The span from the first to the last sentence that is not carrier prose."""
    own = [(a, b) for a, b in sentences(text) if text[a:b] not in carrier]
    if not own:
        return 0, len(text)
    return own[0][0], own[-1][1]


# ---- transforms on a span ----------------------------------------------------------

def quote(span: str, style: str) -> str:
    o, c = QUOTES[style]
    return f"{o}{span}{c}"


def recase(span: str, casing: str) -> str:
    if casing == "upper":
        return span.upper()
    if casing == "title":
        return re.sub(r"\S+", lambda m: m.group(0)[:1].upper() + m.group(0)[1:].lower(), span)
    out, up = [], False
    for ch in span:
        if ch.isalpha():
            ch = ch.upper() if up else ch.lower()
            up = not up
        out.append(ch)
    return "".join(out)


def split(span: str, how: str, rng: random.Random) -> str:
    words = span.split(" ")
    if len(words) < 2:
        return span
    if how == "newline":  # one or two line breaks among the first words
        gaps = sorted(rng.sample(range(min(6, len(words) - 1)), k=min(2, len(words) - 1)))
        seps = ["\n" if i in gaps else " " for i in range(len(words) - 1)]
    elif how == "whitespace":
        seps = [rng.choice(("  ", "   ", "\t", " \t ", "\u00a0 ", "\n  ")) for _ in words[1:]]
    elif how == "punct":
        sep = rng.choice(PUNCT_SEPS)
        seps = [sep] * (len(words) - 1)
    else:  # invisible: one zero-width or soft-hyphen character inside each longer word
        mark = rng.choice(INVISIBLES)
        words = [w[:k] + mark + w[k:] if len(w) >= 4 and (k := rng.randint(1, len(w) - 2))
                 else w for w in words]
        seps = [" "] * (len(words) - 1)
    return words[0] + "".join(s + w for s, w in zip(seps, words[1:]))


def frame_quote(span: str, frame: str, style: str) -> str:
    """Put ``span`` (its final full stop dropped) in quotes inside a frame sentence."""
    return frame.format(q=quote(span.rstrip().rstrip("."), style))


# ---- rows ----------------------------------------------------------------------------

def _row(src: dict, index: int, text: str, variant: str, transform: str, **over: object) -> dict:
    row = {"text": text, "label": src["label"], "kind": src["kind"], "split": src["split"],
           "variant": variant, "transform": transform, "source": index}
    row.update(over)
    return row


def _rng(index: int, what: str) -> random.Random:
    return random.Random(f"{SEED}:{index}:{what}")


def injected_variants(src: dict, index: int, carrier: set[str]) -> list[dict]:
    text = src["text"]
    a, b = payload_span(text, carrier)
    head, span, tail = text[:a], text[a:b], text[b:]

    def put(new: str) -> str:
        return head + new + tail

    out = [_row(src, index, put(quote(span, s)), "quoted", f"quoted:{s}") for s in QUOTES]
    rng = _rng(index, "frame")
    style = rng.choice(list(QUOTES))
    out.append(_row(src, index, put(frame_quote(span, rng.choice(TITLE_FRAMES[src["split"]]),
                                                style)), "quoted", f"quoted:frame:{style}"))
    out += [_row(src, index, put(recase(span, c)), "cased", f"cased:{c}") for c in CASINGS]
    out += [_row(src, index, put(split(span, h, _rng(index, h))), "split", f"split:{h}")
            for h in SPLITS]
    return out


def mention_variants(src: dict, index: int, carrier: set[str]) -> list[dict]:
    a, b = payload_span(src["text"], carrier)
    span = src["text"][a:b]
    rng = _rng(index, "mention")
    out = []
    for frame in rng.sample(MENTION_FRAMES[src["split"]], k=2):
        style = rng.choice(list(QUOTES))
        out.append(_row(src, index, frame_quote(span, frame, style), "quoted",
                        f"mention:{style}", label=0, kind="mention"))
    return out


def clean_variants(src: dict, index: int) -> list[dict]:
    text = src["text"]
    spans = sentences(text)
    out = []
    rng = _rng(index, "clean")
    for style in rng.sample(list(QUOTES), k=2):
        a, b = rng.choice(spans)
        out.append(_row(src, index, text[:a] + quote(text[a:b], style) + text[b:], "quoted",
                        f"quoted:{style}"))
    out += [_row(src, index, recase(text, c), "cased", f"cased:{c}") for c in CASINGS]
    for how in rng.sample(SPLITS, k=2):
        a, b = rng.choice(spans)
        out.append(_row(src, index, text[:a] + split(text[a:b], how, _rng(index, how)) + text[b:],
                        "split", f"split:{how}"))
    return out


def generate(rows: list[dict]) -> list[dict]:
    """All variant rows, in source order; texts equal to an original row are dropped."""
    carrier = carriers(rows)
    originals = {r["text"] for r in rows}
    out: list[dict] = []
    for i, r in enumerate(rows):
        if r["label"] == 1 and r["kind"] in PROSE_KINDS:
            out += injected_variants(r, i, carrier) + mention_variants(r, i, carrier)
        elif r["label"] == 0:
            out += clean_variants(r, i)
    seen: set[str] = set()
    kept = []
    for v in out:
        if v["text"] not in originals and v["text"] not in seen:
            seen.add(v["text"])
            kept.append(v)
    return kept


def dumps(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main() -> None:
    variants = generate(load())
    TARGET.write_text(dumps(variants), encoding="utf-8")
    print(f"{len(variants)} variants -> {TARGET.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
