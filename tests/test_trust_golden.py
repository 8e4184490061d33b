"""The injection screen's verdicts, pinned: a few hundred varied texts and the exact verdict
(score, signals, suspected) the screen gave each when its rules became data (issue 23).

The texts cover every signal at every weight it takes (a check's discount included), mixed
signals, obfuscations (base64, spaced letters, leetspeak, zero-width, tag characters,
look-alike letters), clean prose and near misses; they were drawn from a run of the screen
over about 27,000 inputs (the tests' strings, tests/data, the README, examples/, the dev
corpora, obfuscated payloads and generated strings). A change to a rule that moves any
verdict shows here. After an intended change, rewrite the verdicts (the texts stay):

    python tests/test_trust_golden.py --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rcp_agentic.trust import InjectionScreen

GOLDEN = Path(__file__).resolve().parent / "data" / "injection_golden.jsonl"


def _rows() -> list[dict]:
    return [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line]


def test_every_pinned_verdict_is_unchanged() -> None:
    screen = InjectionScreen()
    rows = _rows()
    assert len(rows) >= 300
    changed = []
    for row in rows:
        got = screen.screen(row["text"])
        if (got.suspected, got.score, list(got.signals)) != (
                row["suspected"], row["score"], row["signals"]):
            changed.append((row["text"][:80], row["score"], row["signals"], got.score,
                            got.signals))
    assert not changed, f"{len(changed)} verdicts changed, e.g. {changed[:3]}"


def test_the_pinned_texts_cover_both_verdicts_and_every_family() -> None:
    rows = _rows()
    assert {r["suspected"] for r in rows} == {True, False}
    signals = {s for r in rows for s in r["signals"]}
    assert {"override", "role_token", "prompt_leak", "secret_exfil", "markdown_exfil",
            "jailbreak", "concealment", "base64_payload", "spaced_letters", "leetspeak",
            "zero_width", "unicode_tags", "mixed_script", "split_words"} <= signals


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    screen = InjectionScreen()
    texts = [row["text"] for row in _rows()]
    with GOLDEN.open("w", encoding="utf-8") as fh:
        for text in texts:
            got = screen.screen(text)
            fh.write(json.dumps({"text": text, "suspected": got.suspected,
                                 "score": got.score, "signals": list(got.signals)}) + "\n")
