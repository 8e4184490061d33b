"""The injection screen's rules as it runs them: each rule of :mod:`.rules` compiled (its
pattern, the token bytes that gate it, its per-match check: reported speech, line or
sentence start, fake dialogue turns ...), and the index that wakes only the rules whose
trigger words occur in a text."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .rules import RULES, RuleSpec

Check = Callable[["re.Match[str]"], float]


@dataclass(frozen=True)
class Rule:
    """A rule of ``rules.RULES`` compiled for the scan.

    *Anchored* rules (``anchors`` set) are tried with ``pattern.match`` only where one
    of their leading words occurs as a whole token; *search* rules (no anchors) scan
    the text, and are reserved for patterns that start with rare punctuation.
    """

    name: str
    weight: float
    pattern: re.Pattern[str]
    anchors: dict[bytes, str]  # token -> the word to find in the text
    gates: tuple[frozenset[bytes], ...]  # each set must share a token with the text
    needles: tuple[str, ...]  # if set, one of these substrings must occur in the text
    check: Check | None  # per-match weight (0 = ignore the match)
    chars: str = ""  # if set, one of these characters must occur (a cheap pre-check)


# Per-match checks (a rule's ``check``, by name): what one match weighs, 0 to ignore it.

_OVR_MARKER = re.compile(
    r"\b(?:all|any|every|your|prior|previous|preceding|above|earlier|former|original|initial"
    r"|system|developer'?s?|operator'?s?|safety|content|ethical|everything|anything|whatever"
    r"|what|user'?s?)\b")
_OVR_AFTER_MARKER = re.compile(
    r"\s+(?:you(?:'ve|\s+have|\s+were|\s+had)?\s+(?:been\s+)?(?:given|told|received|provided)"
    r"|(?:from|by|of)\s+(?:your|the)\s+(?:operator|developer|creator|admin|administrator|system"
    r"|programmers?|owner))")
_QUALIFIER = re.compile(
    r"\s*(?:regarding|about|concerning|relating\s+to|related\s+to|with\s+regard\s+to|as\s+to"
    r"|with\s+respect\s+to|in\s+(?:this|that|the)\s+(?:memo|email|letter|notice|leaflet))\b")


def _reported(m: re.Match[str]) -> bool:
    """The imperative is reported speech: '… told the model to ignore …'."""
    before = m.string[max(0, m.start() - 12):m.start()]
    return bool(_REPORTED.search(before))


_REPORTED = re.compile(r"(?:\bto|\bnot|\bnever|\bdon'?t|\bhow|\bwould|\bcould|\bmight)\s*$")


def _override_check(m: re.Match[str]) -> float:
    span = m.group(0)
    after = m.string[m.end():m.end() + 60]
    if not (_OVR_MARKER.search(span) or _OVR_AFTER_MARKER.match(after)
            or span.rstrip().endswith("above")):
        return 0.3 if _OVR_WEAK_OBJ.search(span) else 0.0
    if _reported(m) or _QUALIFIER.match(after):
        return 0.3
    return 0.75


_OVR_WEAK_OBJ = re.compile(r"instructions?|prompt|rules|guidelines")


def _reported_check(weight: float) -> Check:
    def check(m: re.Match[str]) -> float:
        return weight * 0.5 if _reported(m) else weight
    return check


def _line_start_check(weight: float) -> Check:
    """Only count the match when it opens a line (after optional markup)."""
    def check(m: re.Match[str]) -> float:
        line_start = m.string.rfind("\n", 0, m.start()) + 1
        prefix = m.string[line_start:m.start()]
        return weight if not prefix.strip(" \t>*_#=-~[]<") else 0.0
    return check


def _sentence_start_check(weight: float) -> Check:
    """Only count a vocative that opens a sentence, line or markup element."""
    def check(m: re.Match[str]) -> float:
        before = m.string[:m.start()].rstrip()
        return weight if not before or before[-1] in _SENTENCE_OPENERS else 0.0
    return check


_SENTENCE_OPENERS = ".!?>:\n(\"'`\u201c\u201e\u2018\u201a\u00ab\u00bb\u2039"


def _distinct_roles_check(m: re.Match[str]) -> float:
    roles = set(_TURN.findall(m.group(0)))
    return 0.5 if len(roles) >= 2 else 0.0


_TURN = re.compile(r"(?m)^[ \t]*(human|user|assistant|system)[ \t]*:")


def _foreign_marker_check(m: re.Match[str]) -> float:
    return 0.75 if _FOREIGN_MARKER.search(m.group(0)) else 0.0


_FOREIGN_MARKER = re.compile(
    r"\b(?:alle[ns]?|vorherigen|bisherigen|vorigen|obigen|früheren|deine[n]?|ihre[n]?"
    r"|toutes|tous|précédentes|precedentes|antérieures|anterieures|ci-dessus|tes|vos|initiales"
    r"|todas|anteriores|previas|prévias|tus|sus|precedenti|tutte|tue|voorgaande|vorige"
    r"|eerdere|bovenstaande|je|ricevute|date|originali|iniziali|originales|di\s+prima)\b")


def _fake_turns_check(m: re.Match[str]) -> float:
    """Human:/Assistant: turns of at least two roles, the first opening a line."""
    return _line_start_check(1.0)(m) and _distinct_roles_check(m)


# A rule's ``check`` names one of these; each makes the per-match weighting for the rule's
# weight.
_CHECKS: dict[str, Callable[[float], Check]] = {
    "reported": _reported_check,
    "line_start": _line_start_check,
    "sentence_start": _sentence_start_check,
    "override": lambda weight: _override_check,
    "foreign_marker": lambda weight: _foreign_marker_check,
    "fake_turns": lambda weight: _fake_turns_check,
}


def _w(*words: str) -> frozenset[bytes]:
    return frozenset(w.encode() for w in words)


def _compile(spec: RuleSpec) -> Rule:
    """A rule of ``rules`` as the screen runs it: its pattern compiled, its words as
    the token bytes the gate compares, an anchored rule gated by its anchors as well, a search
    rule pre-checked by the first characters of its needles."""
    check = _CHECKS[spec.check](spec.weight) if spec.check else None
    words = spec.anchors.split()
    gates = tuple(_w(*g) for g in spec.gates)
    if words:
        return Rule(spec.name, spec.weight, re.compile(spec.pattern),
                     {w.encode(): w for w in words}, (_w(*words), *gates), (), check, spec.chars)
    chars = "".join(sorted({n[0] for n in spec.needles}))
    return Rule(spec.name, spec.weight, re.compile(spec.pattern), {}, gates, spec.needles, check,
                 chars)


COMPILED_RULES: tuple[Rule, ...] = tuple(_compile(spec) for spec in RULES)


# Very common words make poor index keys; a rule is indexed under its gate with the
# fewest of them, so ordinary prose wakes up few rules.
_COMMON = _w("a", "an", "the", "to", "for", "you", "your", "do", "no", "not", "if", "in", "it",
             "this", "when", "new", "use", "run", "all", "each", "every", "show", "add", "end",
             "include", "start", "list", "what", "as", "from", "now", "only", "true", "real",
             "set", "put", "pay", "never", "stop", "user", "one", "open", "type", "write", "give",
             "tell", "have", "are", "is", "be", "with", "that", "and", "or", "of", "on", "at",
             "by", "will", "can", "may", "must", "should", "data", "system", "model", "message",
             "first", "last", "full", "before", "above", "order", "orders", "code", "key",
             "keys", "card", "access", "session", "post", "share", "out", "call", "mark",
             "present", "return", "copy", "print", "enter", "without", "free")


def _index_key(rule: Rule) -> frozenset[bytes]:
    return min(rule.gates, key=lambda g: (len(g & _COMMON), len(g)))


RULE_INDEX: dict[bytes, list[int]] = {}
UNGATED: list[int] = []
for _i, _r in enumerate(COMPILED_RULES):
    if _r.gates:
        for _tok in _index_key(_r):
            RULE_INDEX.setdefault(_tok, []).append(_i)
    else:
        UNGATED.append(_i)
TRIGGERS = frozenset(RULE_INDEX)
RARE_TRIGGERS = TRIGGERS - _COMMON
# Every word a rule can need (gates, anchors and literal words of the patterns): a
# rewrite (leetspeak, spaced letters) that yields none of them new cannot add a match.
VOCAB = frozenset(w for w in frozenset().union(*(g for r in COMPILED_RULES for g in r.gates)) | frozenset(
    w.encode() for r in COMPILED_RULES for w in re.findall(r"[a-z]{3,}", r.pattern.pattern)) if len(w) > 2)
