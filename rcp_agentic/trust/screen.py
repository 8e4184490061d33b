"""Heuristic screen for indirect prompt injection in retrieved text (RCP §15.2).

``InjectionScreen().screen(text)`` returns a :class:`Screening`: a ``score`` in [0, 1], the
boolean ``suspected`` (``score >= threshold``, 0.5 by default) and the names of the rules
that fired; per §15.2 it is an advisory hint, never proof of safety. A text is normalised
(Unicode tag characters, zero-width and bidi controls, look-alike letters), its tokens wake
only the rules whose trigger words occur (:mod:`.rules`; spaced-out, leetspeak, joined and
base64 spellings are rewritten and screened again), and the distinct signals' weights
combine by noisy-OR, reported speech and quoted mentions counting less. It is a
keyword/regex screen: a paraphrase without the usual vocabulary, another language, a cipher
or text split across chunks is missed, and text quoting an attack can be flagged. Each step
and every limit: ``docs/internals.md``, "The injection screen".
"""

from __future__ import annotations

import base64
import binascii
import re
import string
import unicodedata
from dataclasses import dataclass

from .screen_rules import COMPILED_RULES, RARE_TRIGGERS, RULE_INDEX, TRIGGERS, UNGATED, VOCAB, Rule

__all__ = ["InjectionScreen", "Screening"]


@dataclass(frozen=True)
class Screening:
    """The verdict on one text."""

    suspected: bool
    score: float  # in [0, 1], higher = more likely an injection
    signals: tuple[str, ...]  # names of the rules that fired, for explanations


# --------------------------------------------------------------------------------------
# Normalisation tables
# --------------------------------------------------------------------------------------

# Invisible format characters: soft hyphen, Mongolian vowel separator, zero-width
# space/non-joiner/joiner, LRM/RLM, bidi embeddings/overrides/isolates, word joiner,
# invisible operators, BOM / zero-width no-break space.
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
# Zero-width characters; one *between Latin letters* is a signal (not one after a slash,
# in an emoji sequence, in Persian (ZWNJ), nor a soft hyphen).
_ZERO_WIDTH = re.compile("[\u200b-\u200d\u2060\ufeff]+")
_TAG_RUN = re.compile("[\U000e0000-\U000e007f]+")
_BLACK_FLAG = "\U0001f3f4"  # subdivision flags (England, Scotland, Wales) use tag chars
_LATIN = "a-zA-Z"
_CONFUSABLE_CHARS = (
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u04cf\u0501"  # Cyrillic lower
    "\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0406\u0408\u0405"  # upper
    "\u03bf\u03b1\u03b9\u03c1\u03bd\u039f\u0391\u0392\u0395\u0397\u0399\u039a\u039c\u039d\u03a1\u03a4\u03a7"  # Greek
)
_CONFUSABLE_LATIN = (
    "aeopcyxijsld"
    "ABEKMHOPCTXIJS"
    "oaipvOABEHIKMNPTX"
)
_CONFUSABLES = str.maketrans(_CONFUSABLE_CHARS, _CONFUSABLE_LATIN)
_CYRILLIC_GREEK = re.compile("[\u0370-\u04ff]")
_SPECIAL = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
                      "\U000e0000-\U000e007f]")
_MIXED_SCRIPT = re.compile(
    f"[{_LATIN}][{_CONFUSABLE_CHARS}]|[{_CONFUSABLE_CHARS}][{_LATIN}]")

# Token gate: ASCII punctuation -> space, then split.  Apostrophe and underscore stay
# inside tokens ("don't", "send_email"); the hyphen/period split "i.g.n.o.r.e".
_PUNCT = bytes(32 if (chr(i) in string.punctuation and chr(i) not in "'_") else i
               for i in range(256))
_SINGLE_LETTERS = frozenset(bytes([c]) for c in range(ord("a"), ord("z") + 1)) - {b"a", b"i"}

# Spaced-out letters: "i g n o r e   a l l", "i.g.n.o.r.e", "I-G-N-O-R-E".
_SPACED_RUN = re.compile(r"(?<![a-z0-9])[a-z](?:[ .\-_*·]{1,3}[a-z](?![a-z0-9])){4,}")
_SEP_SPLIT = re.compile(r"([ .\-_*·]+)")

# Leetspeak: short tokens with a substituted digit between letters ("pr3v10us", "y0ur").
_LEET_TOKEN = re.compile(r"\b(?=[a-z0-9@$]*[a-z][013457@$]+[a-z])[a-z0-9@$]{3,20}\b")
_LEET = str.maketrans("013457@$", "oieastas")
_LEET_SHAPE = bytes(ord("a") if chr(i).isalpha() and i < 128 else ord("0") if chr(i) in "013457@$"
                    else 32 for i in range(256))

_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{24,}={0,2}")


# --------------------------------------------------------------------------------------
# The screen
# --------------------------------------------------------------------------------------

class InjectionScreen:
    """Heuristic screen for instructions aimed at an LLM reader hidden in retrieved text."""

    def __init__(self, threshold: float = 0.5) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        self.threshold = threshold

    def screen(self, text: str) -> Screening:
        """Score one passage; never raises on odd input (empty, binary-ish, huge)."""
        hits: dict[str, float] = {}
        if text:
            _scan(text, hits, depth=0)
        keep = 1.0
        for w in hits.values():
            keep *= 1.0 - w
        score = round(1.0 - keep, 4)
        return Screening(suspected=score >= self.threshold, score=score,
                         signals=tuple(sorted(hits)))


def _tokens(low: str) -> set[bytes]:
    raw = low.encode("utf-8", "replace").translate(_PUNCT)
    if not low.isascii():  # curly quotes, dashes, guillemets are punctuation too
        raw = _UNICODE_PUNCT.sub(b" ", raw)
    toks = set(raw.split())
    if b"'" in raw and (b" '" in raw or b"' " in raw or raw[:1] == b"'" or raw[-1:] == b"'"):
        # a single quote opening or closing a word: 'ignore -> ignore
        toks.update(raw.replace(b" '", b" ").replace(b"' ", b" ").strip(b"'").split())
    return toks


# UTF-8 of U+2010-U+205E (dashes, curly quotes, ellipsis, primes) and of « ».
_UNICODE_PUNCT = re.compile(rb"\xe2\x80[\x90-\xbf]|\xe2\x81[\x80-\x9e]|\xc2[\xab\xbb]")


def _scan(text: str, hits: dict[str, float], depth: int) -> None:
    if not text.isascii():
        text = _normalise(text, hits)
    low = text.lower()
    toks = _tokens(low)
    folded = _fold(text)
    _apply_rules(low if folded == text else folded.lower(), toks, hits)

    # words joined by punctuation ("ignore.all.previous"); a run needs a rare trigger word
    joined = (_split_word_windows(low) if "_" in low or not toks.isdisjoint(RARE_TRIGGERS)
              else None)
    if joined is not None:
        before = len(hits)
        _apply_rules(joined, _tokens(joined), hits)
        if len(hits) > before:
            _add(hits, "split_words", 0.2)
    if len(toks & _SINGLE_LETTERS) >= 4:  # spaced-out letters
        collapsed, n = _collapse_spaced(low)
        if n:
            _rescan(collapsed, toks, hits, "spaced_letters")
    if b"a0a" in low.encode("utf-8", "replace").translate(_LEET_SHAPE) and len(
            _LEET_TOKEN.findall(low)) >= 2:  # leetspeak: a digit between letters, twice
        _rescan(low.translate(_LEET), toks, hits, "leetspeak")
    if depth == 0 and toks and max(map(len, toks)) >= 16 and any(
            len(t) >= 16 and t.isascii() for t in toks):
        for blob in _B64_RUN.findall(text):
            decoded = _b64_text(blob)
            if decoded:
                inner: dict[str, float] = {}
                _scan(decoded, inner, depth + 1)
                if inner:
                    for name, w in inner.items():
                        _add(hits, "base64/" + name, w)
                    _add(hits, "base64_payload", 0.3)


# A line break inside a sentence: after a lower-case letter or comma, before a lower-case
# word that does not open a role line ("user:", "system>").  Case is still visible here.
_MID_SENTENCE_BREAK = re.compile(r"(?<=[a-z,;])[ \t]*\n[ \t]*(?=[a-z]+\b(?![ \t]*[:>\]]))")
_SPACE_RUN = re.compile(r"[ \t]*\t[ \t]*| {2,}")


def _fold(text: str) -> str:
    """Join lines broken mid-sentence and fold runs of spaces/tabs, for the rules only
    (spaced-out letters are recognised on the unfolded text)."""
    if "\n" in text:
        text = _MID_SENTENCE_BREAK.sub(" ", text)
    if "  " in text or "\t" in text:
        text = _SPACE_RUN.sub(" ", text)
    return text


# Three or more words joined by one repeated separator: "ignore.all.previous",
# "ignore_all_previous", "ignore - all - previous".  One literal-prefixed pattern per
# separator keeps the search fast on ordinary text.
_WORD = r"[^\W_]+(?:'[^\W_]+)?"
_JOINERS = "-/*|~+_.:;"
_JOINED = tuple((c, re.compile(re.escape(c) + _WORD + re.escape(c) + r"[^\W_]")) for c in _JOINERS)
_JOINED_SPACED = re.compile(r" ([\-/*|~+_.:;]{1,3}) " + _WORD + r" \1 [^\W_]")
_JOIN_REACH = 300  # characters of a run rewritten after its first separator


def _split_word_windows(low: str) -> str | None:
    """The stretches of text around joined-word runs, with their separator turned into a
    space (one stretch per line); None when there is no run."""
    windows: list[str] = []
    end = -1
    for sep, pattern in _JOINED:
        if sep in low:
            for m in pattern.finditer(low):
                if m.start() > end:
                    _keep_window(windows, low, m.start(), sep)
                    end = m.start() + _JOIN_REACH
    if " " in low:
        for m in _JOINED_SPACED.finditer(low):
            if m.start() > end:
                _keep_window(windows, low, m.start(), f" {m.group(1)} ")
                end = m.start() + _JOIN_REACH
    return "\n".join(windows) if windows else None


def _keep_window(windows: list[str], low: str, start: int, sep: str) -> None:
    """Add the unjoined stretch around a run if it holds a trigger word that is not a very
    common one ("state-of-the-art" and "e.g." are not worth a second pass of the rules)."""
    window = low[max(0, start - 60):start + _JOIN_REACH].replace(sep, " ")
    if not _tokens(window).isdisjoint(RARE_TRIGGERS):
        windows.append(window)


def _rescan(rewritten: str, toks: set[bytes], hits: dict[str, float], signal: str) -> None:
    """Screen a de-obfuscated rewrite when it brings new rule words; note if it adds hits."""
    new_toks = _tokens(rewritten)
    if (new_toks - toks).isdisjoint(VOCAB):
        return
    before = len(hits)
    _apply_rules(rewritten, new_toks, hits)
    if len(hits) > before:
        _add(hits, signal, 0.2)


def _add(hits: dict[str, float], name: str, weight: float) -> None:
    if weight > hits.get(name, 0.0):
        hits[name] = weight


def _apply_rules(low: str, toks: set[bytes], hits: dict[str, float]) -> None:
    candidates = set(UNGATED)
    for tok in toks & TRIGGERS:
        candidates.update(RULE_INDEX[tok])
    for i in sorted(candidates):
        _run_rule(COMPILED_RULES[i], low, toks, hits)


def _run_rule(rule: Rule, low: str, toks: set[bytes], hits: dict[str, float]) -> None:
    if rule.weight <= hits.get(rule.name, 0.0):
        return
    if rule.chars:
        for c in rule.chars:
            if c in low:
                break
        else:
            return
    if rule.needles:
        for x in rule.needles:
            if x in low:
                break
        else:
            return
    for g in rule.gates:
        if toks.isdisjoint(g):
            return
    if rule.anchors:
        n = len(low)
        for tok in toks.intersection(rule.anchors):
            word = rule.anchors[tok]
            pos = low.find(word)
            while pos >= 0:
                end = pos + len(word)
                if (pos == 0 or not low[pos - 1].isalnum()) and (
                        end == n or not low[end].isalnum()):
                    m = rule.pattern.match(low, pos)
                    if m and _record(rule, m, hits):
                        return
                pos = low.find(word, end)
    elif rule.check is None:  # a search rule: its first match decides
        m = rule.pattern.search(low)
        if m:
            _record(rule, m, hits)
    else:
        for m in rule.pattern.finditer(low):
            if _record(rule, m, hits):
                return


# Opening quote -> its closing quotes.
_QUOTE_PAIRS = {'"': '"', "'": "'", "`": "`", "\u201c": "\u201d", "\u201e": "\u201c\u201d",
                "\u2018": "\u2019", "\u201a": "\u2018\u2019", "\u00ab": "\u00bb",
                "\u00bb": "\u00ab", "\u2039": "\u203a"}
_ANY_QUOTE = re.compile("[" + re.escape("".join(_QUOTE_PAIRS)) + "]")
_MENTION_FACTOR = 0.4  # weight kept by a match inside a framed, quoted mention
_QUOTE_REACH = 200  # characters looked at on each side of a match for its quotes
# Meta-linguistic framing: words that say the quoted text is being talked *about* (as an
# attack, an example, a string) rather than said.  Naming words alone ("called",
# "titled", "known as") are not enough: a song or a sign can be called anything.
_MENTION_CUE = re.compile(
    r"\b(?:phrases?|wording|strings?|sentences?|keywords?|payloads?|(?:prompt[- ])?injections?"
    r"|jailbreaks?|attacks?|attackers?|exploits?|adversarial|malicious|red[- ]team\w*"
    r"|researchers?|examples?|e\.g\.|such\s+as|classic|blocklists?|filters?|detect\w*"
    r"|techniques?|signatures?)\b")


def _quote_span(m: re.Match[str]) -> tuple[int, int] | None:
    """(opening, closing) quote positions around the match, on its line, else None."""
    s = m.string
    lo = max(s.rfind("\n", 0, m.start()) + 1, m.start() - _QUOTE_REACH)
    hi = s.find("\n", m.start())
    hi = min(len(s) if hi < 0 else hi, m.end() + _QUOTE_REACH)
    if not _ANY_QUOTE.search(s, lo, m.start()):
        return None
    for o in range(m.start() - 1, lo - 1, -1):
        closers = _QUOTE_PAIRS.get(s[o])
        if closers is None or (o > 0 and s[o - 1].isalnum()):
            continue  # not a quote, or an apostrophe ("user's")
        if any(c in s[o + 1:m.start()] for c in closers):
            return None  # the nearest quote before the match is already closed
        for c in range(m.start(), hi):
            if s[c] in closers and (c + 1 == len(s) or not s[c + 1].isalnum()):
                return o, c
        return None
    return None


def _mentioned(m: re.Match[str]) -> bool:
    """The phrase is *mentioned* in quotes ('the phrase "ignore all previous …" is a classic
    attack'), not issued: it sits inside a quoted span, the quote does not open a value
    (``= "…"``, ``("…"``), and the sentence around the quote frames it meta-linguistically.
    Quote marks alone prove nothing: a quoted imperative is still addressed to its reader."""
    span = _quote_span(m)
    if span is None:
        return False
    o, c = span
    s = m.string
    lead = s[max(0, o - 2):o].rstrip()
    if lead and lead[-1] in "=([{":
        return False
    before = s[max(0, o - _QUOTE_REACH):o]
    before = before[max(before.rfind(". "), before.rfind("\n")) + 1:]
    after = s[c + 1:c + 1 + _QUOTE_REACH]
    stop = min((i for i in (after.find(". "), after.find("\n")) if i >= 0), default=len(after))
    return bool(_MENTION_CUE.search(before) or _MENTION_CUE.search(after[:stop]))


def _record(rule: Rule, m: re.Match[str], hits: dict[str, float]) -> bool:
    """Add the match's weight; True when the rule is saturated (no need to look further)."""
    w = rule.check(m) if rule.check is not None else rule.weight
    if w and _mentioned(m):
        w *= _MENTION_FACTOR
    if w:
        _add(hits, rule.name, w)
    return w >= rule.weight


def _normalise(text: str, hits: dict[str, float]) -> str:
    """Undo Unicode obfuscations; record the ones that look adversarial."""
    if _SPECIAL.search(text):
        if _TAG_RUN.search(text):  # Unicode tag characters: decode instead of dropping
            def untag(m: re.Match[str]) -> str:
                run = m.group(0)
                if m.start() > 0 and text[m.start() - 1] == _BLACK_FLAG and len(run) <= 8:
                    return ""  # subdivision flag, e.g. England
                _add(hits, "unicode_tags", 0.6)
                return " " + "".join(chr(ord(c) - 0xE0000) for c in run if ord(c) < 0xE007F) + " "
            text = _TAG_RUN.sub(untag, text)
        if _INVISIBLE.search(text):
            if any(_ascii_letter(text, m.start() - 1) and _ascii_letter(text, m.end())
                   for m in _ZERO_WIDTH.finditer(text)):
                # Between letters a zero-width character either splits a keyword
                # ("ig\u200bnore") or stands in for a space ("ignore\u200ball"):
                # scan both readings.
                _add(hits, "zero_width", 0.3)
                text = _INVISIBLE.sub("", text) + "\n" + _INVISIBLE.sub(" ", text)
            else:
                text = _INVISIBLE.sub("", text)
    text = unicodedata.normalize("NFKC", text)
    if _CYRILLIC_GREEK.search(text) and _MIXED_SCRIPT.search(text):
        _add(hits, "mixed_script", 0.3)
        text = text.translate(_CONFUSABLES)
    return text


def _ascii_letter(text: str, i: int) -> bool:
    return 0 <= i < len(text) and text[i].isascii() and text[i].isalpha()


def _collapse_spaced(low: str) -> tuple[str, int]:
    """Re-join spaced-out letters; the most common separator is the intra-word one."""
    def join(m: re.Match[str]) -> str:
        parts = _SEP_SPLIT.split(m.group(0))  # letter, sep, letter, sep, ...
        seps = parts[1::2]
        intra = max(set(seps), key=seps.count)
        out = [parts[0]]
        for sep, letter in zip(seps, parts[2::2]):
            out.append(letter if sep == intra else " " + letter)
        return "".join(out)
    return _SPACED_RUN.subn(join, low)


def _b64_text(blob: str) -> str | None:
    """Decode a base64 run if it yields mostly printable text, else None."""
    s = blob.rstrip("=")
    if len(s) % 4 == 1:
        return None
    try:
        raw = base64.b64decode(s + "=" * (-len(s) % 4), altchars=b"-_" if ("-" in s or "_" in s)
                               else None, validate=True)
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    printable = sum(c.isprintable() or c in "\n\t" for c in decoded)
    if len(decoded) < 12 or printable < 0.95 * len(decoded) or " " not in decoded:
        return None
    return decoded
