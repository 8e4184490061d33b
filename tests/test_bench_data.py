"""The benchmarks find their data from any clone: ``$RCP_AGENTIC_DATA`` or ``../shared/data``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

PROBE = """
import json
from bench import corrective, scifact
from bench.data import data_path
corpus, queries, qrels = scifact.load_dataset()
docs, questions = corrective.load_set("hotpotqa")
print(json.dumps({"root": str(data_path()), "scifact": str(scifact.DATA_DIR),
                  "corpus": corpus, "queries": queries, "qrels": qrels,
                  "docs": [d["id"] for d in docs],
                  "questions": [[q, sorted(ids)] for q, ids in questions]}))
"""


def _probe(env_root: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RCP_AGENTIC_DATA"}
    if env_root is not None:
        env["RCP_AGENTIC_DATA"] = str(env_root)
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_benches_read_the_data_root_from_the_environment(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _write_jsonl(root / "scifact" / "corpus.jsonl",
                 [{"_id": "d1", "title": "T", "text": "body"}])
    _write_jsonl(root / "scifact" / "train_queries.jsonl", [{"_id": "q1", "text": "question"}])
    (root / "scifact" / "train_qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    _write_jsonl(root / "multihop" / "hotpotqa" / "corpus.jsonl",
                 [{"_id": "p1", "title": "P", "text": "passage"}])
    _write_jsonl(root / "multihop" / "hotpotqa" / "questions.jsonl",
                 [{"question": "who?", "supporting_ids": ["p1"]}])
    got = _probe(root)
    assert got["root"] == str(root) and got["scifact"] == str(root / "scifact")
    assert got["corpus"] == {"d1": "T\n\nbody"} and got["queries"] == {"q1": "question"}
    assert got["qrels"] == {"q1": {"d1": 1}}
    assert got["docs"] == ["p1"] and got["questions"] == [["who?", ["p1"]]]


def test_default_data_root_is_shared_data_beside_the_checkout() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RCP_AGENTIC_DATA"}
    proc = subprocess.run([sys.executable, "-c",
                           "from bench.data import data_path; print(data_path('scifact'))"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(REPO.parent / "shared" / "data" / "scifact")


def test_importing_a_bench_leaves_the_derived_mode_alone() -> None:
    """A bench run as a script builds derived units inline; imported (as these tests do),
    it must not switch the importing process's engines from the background default."""
    probe = ("import importlib, os\n"
             "for name in ('communities', 'community_scale', 'composed_confidence', "
             "'confidence', 'corrective', 'graph', 'graph_ops', 'raptor'):\n"
             "    importlib.import_module('bench.' + name)\n"
             "print(os.environ.get('RCP_AGENTIC_DERIVED_UPDATES'))\n")
    env = {k: v for k, v in os.environ.items() if k != "RCP_AGENTIC_DERIVED_UPDATES"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, check=True,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "None"
