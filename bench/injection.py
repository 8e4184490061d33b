"""Prompt-injection screen (§15.2) on the labelled set: quality per split and kind, and speed.

    python bench/injection.py [--misses] [--repeat 200]

Quality: precision, recall, F1 and false-positive rate of ``InjectionScreen`` on the
``dev`` split (rules were tuned on it) and the held-out ``test`` split of
``tests/data/injection.jsonl``, separately; then, per ``kind`` and split, the share
flagged (recall for injected kinds, false-positive rate for clean kinds).

Variants: the same on ``tests/data/injection_variants.jsonl`` (``bench/injection_variants.py``:
quoted, re-cased and split copies of the injected and clean rows, plus quoted attack
phrases *mentioned* in security-article framing), per split and variant kind, and the
share flagged per transform.

Speed: median µs per ``screen()`` call on 1 kB passages (1,024 characters) built by
concatenating texts of the set: ordinary prose (``clean_general``), hard negatives
(every clean kind, dense in trigger words) and injected texts.  Each passage is
screened ``--repeat`` times; the per-call mean of each passage is the sample, and
the median / p90 over 60 passages is reported.  Single-threaded, CPython, wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rcp_agentic.trust import InjectionScreen

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "injection.jsonl"
VARIANTS = DATA.with_name("injection_variants.jsonl")
VARIANT_KINDS = ("original", "quoted", "cased", "split")


def load(path: Path = DATA) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def quality(rows: list[dict], flagged: list[bool]) -> dict[str, float]:
    tp = sum(f and r["label"] == 1 for r, f in zip(rows, flagged))
    fp = sum(f and r["label"] == 0 for r, f in zip(rows, flagged))
    fn = sum((not f) and r["label"] == 1 for r, f in zip(rows, flagged))
    tn = sum((not f) and r["label"] == 0 for r, f in zip(rows, flagged))
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"n": len(rows), "pos": tp + fn, "neg": fp + tn, "tp": tp, "fp": fp, "fn": fn,
            "precision": p, "recall": r, "f1": f1, "fpr": fp / (fp + tn) if fp + tn else 0.0}


def passages(texts: list[str], n: int = 60, size: int = 1024) -> list[str]:
    out, i = [], 0
    while len(out) < n:
        buf: list[str] = []
        while sum(len(t) + 1 for t in buf) < size:
            buf.append(texts[i % len(texts)])
            i += 1
        out.append(" ".join(buf)[:size])
    return out


def timing(screen: InjectionScreen, texts: list[str], repeat: int) -> tuple[float, float]:
    samples = []
    for p in texts:
        screen.screen(p)  # warm
        t0 = time.perf_counter_ns()
        for _ in range(repeat):
            screen.screen(p)
        samples.append((time.perf_counter_ns() - t0) / repeat / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def _line(label: str, q: dict[str, float]) -> str:
    return (f"{label:16} {q['n']:5d} {q['pos']:4d} {q['neg']:5d}  {q['precision']:9.3f} "
            f"{q['recall']:6.3f} {q['f1']:6.3f} {q['fpr']:6.3f}  {q['tp']:4d} {q['fp']:4d} "
            f"{q['fn']:4d}")


def report_variants(rows: list[dict], flagged: list[bool], variants: list[dict],
                    v_flagged: list[bool]) -> None:
    """Quality per split and variant kind, then the share flagged per transform."""
    print(f"\nvariants: {VARIANTS.relative_to(VARIANTS.parents[2])} ({len(variants)} texts;"
          " 'original' = the rows above; mentions count as clean 'quoted')")
    print(f"{'split/variant':16} {'n':>5} {'inj':>4} {'clean':>5}  {'precision':>9} {'recall':>6} "
          f"{'F1':>6} {'FPR':>6}    tp   fp   fn")
    pool = [(r, f, "original") for r, f in zip(rows, flagged)] + [
        (r, f, r["variant"]) for r, f in zip(variants, v_flagged)]
    for split in ("dev", "test"):
        for kind in VARIANT_KINDS:
            sel = [(r, f) for r, f, k in pool if r["split"] == split and k == kind]
            print(_line(f"{split}/{kind}", quality([r for r, _ in sel], [f for _, f in sel])))
        sel = [(r, f) for r, f, _ in pool if r["split"] == split]
        print(_line(f"{split}/all", quality([r for r, _ in sel], [f for _, f in sel])))

    print("\nper transform: flagged / n  (label 1: recall; label 0: false-positive rate)")
    per: dict[tuple[int, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r, f in zip(variants, v_flagged):
        name = "mention" if r["kind"] == "mention" else r["transform"].split(":frame:")[0] + (
            ":frame" if ":frame:" in r["transform"] else "")
        per[(r["label"], name)][r["split"]].append(int(f))
    print(f"  {'label':5} {'transform':22} {'dev':>9} {'test':>9}")
    for (label, name), by in sorted(per.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        cells = [f"{sum(by[s]):>3}/{len(by[s]):<3}" if by.get(s) else "    -    "
                 for s in ("dev", "test")]
        print(f"  {label:5d} {name:22} {cells[0]:>9} {cells[1]:>9}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--misses", action="store_true", help="list false negatives / positives")
    ap.add_argument("--repeat", type=int, default=200, help="screen() calls per timed passage")
    args = ap.parse_args()

    screen = InjectionScreen()
    rows = load()
    verdicts = [screen.screen(r["text"]) for r in rows]
    flagged = [v.suspected for v in verdicts]

    print(f"InjectionScreen(threshold={screen.threshold}) on {DATA.relative_to(DATA.parents[2])}"
          f" ({len(rows)} texts)\n")
    print(f"{'split':6} {'n':>4} {'inj':>4} {'clean':>5}  {'precision':>9} {'recall':>6} "
          f"{'F1':>6} {'FPR':>6}   tp  fp  fn")
    for split in ("dev", "test"):
        idx = [i for i, r in enumerate(rows) if r["split"] == split]
        q = quality([rows[i] for i in idx], [flagged[i] for i in idx])
        print(f"{split:6} {q['n']:4d} {q['pos']:4d} {q['neg']:5d}  {q['precision']:9.3f} "
              f"{q['recall']:6.3f} {q['f1']:6.3f} {q['fpr']:6.3f}  {q['tp']:3d} {q['fp']:3d} "
              f"{q['fn']:3d}")

    print("\nper kind: flagged / n  (injected kinds: recall; clean kinds: false-positive rate)")
    per: dict[tuple[int, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r, f in zip(rows, flagged):
        per[(r["label"], r["kind"])][r["split"]].append(int(f))
    print(f"  {'label':5} {'kind':18} {'dev':>9} {'test':>9} {'all':>13}")
    for (label, kind), by in sorted(per.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        cells = []
        for split in ("dev", "test"):
            xs = by.get(split, [])
            cells.append(f"{sum(xs):>3}/{len(xs):<3}" if xs else "    -    ")
        xs = by.get("dev", []) + by.get("test", [])
        print(f"  {label:5d} {kind:18} {cells[0]:>9} {cells[1]:>9} "
              f"{sum(xs):>3}/{len(xs):<3} {sum(xs) / len(xs):5.2f}")

    variants = load(VARIANTS)
    v_verdicts = [screen.screen(r["text"]) for r in variants]
    report_variants(rows, flagged, variants, [v.suspected for v in v_verdicts])

    if args.misses:
        print("\nfalse negatives / false positives:")
        for r, v in zip(rows + variants, verdicts + v_verdicts):
            if v.suspected != bool(r["label"]):
                tag = "FN" if r["label"] else "FP"
                print(f"  {tag} [{r['split']}/{r['kind']}/{r.get('transform', 'original')}] score={v.score:.2f} {v.signals} "
                      f"{r['text'][:110]!r}")

    print(f"\nspeed: µs per screen() on 1 kB passages (60 passages x {args.repeat} calls)")
    sets = {
        "ordinary prose": [r["text"] for r in rows if r["kind"] == "clean_general"],
        "hard negatives": [r["text"] for r in rows if r["label"] == 0
                           and r["kind"] != "clean_general"],
        "injected": [r["text"] for r in rows if r["label"] == 1],
    }
    for name, texts in sets.items():
        med, p90 = timing(screen, passages(texts), args.repeat)
        print(f"  {name:15} median {med:7.1f}   p90 {p90:7.1f}")


if __name__ == "__main__":
    main()
