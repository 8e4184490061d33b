"""The query path of the bundled MiniLM on onnxruntime, with a fixed thread budget.

A query embedding is most of a retrieve's time, and torch's intra-op team (two threads on a
two-core machine) spins for a core another process holds: one query measured p50 540 ms that
way against 10.8 ms single-threaded (issue 24). An onnxruntime session made with
``intra_op_num_threads=1`` runs each query on its caller's thread, so concurrent queries use
the server's request threads and never more, and an ingest embedding batches with torch (its
own ``torch_threads``) cannot take a thread team from them.

The same weights, exported once: the transformer plus the mean pooling the model's
sentence-transformers config names, through torch's TorchScript exporter (the ``onnx``
package), into ``<cache>/onnx/<weights sha256[:16]>-<EXPORT_FORMAT>/`` (``<cache>``:
``RCP_AGENTIC_CACHE``, else ``$XDG_CACHE_HOME/rcp-agentic``, else ``~/.cache/rcp-agentic``).
The export is checked against the torch model on :data:`CHECK_TEXTS` before it is kept: the
largest difference of any normalised coordinate must be at most :data:`MAX_DELTA`, else it is
not used. It is written under a temporary name and renamed, so a process never reads half of
one another process is writing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

EXPORT_FORMAT = "mean-pooled-v1"  # what the exported graph computes; a change re-exports
MAX_DELTA = 1e-5
ONNX_FILE = "model.onnx"
CHECK_FILE = "check.json"
DIGESTS_FILE = "digests.json"  # weight digests by file path, size and mtime
# Short, long (truncated at the model's max length), non-Latin, punctuation, empty-ish.
CHECK_TEXTS = (
    "What causes bone loss in older adults?",
    "Vitamin D deficiency is associated with reduced bone mineral density and a higher risk "
    "of fractures, according to a meta-analysis of 42 cohort studies.",
    "Velvet Lanterns were a Norwegian band formed in Bergen in 1974.",
    "Die Zellmembran besteht aus einer Lipiddoppelschicht. Ça va? 東京は日本の首都です。",
    "a " * 400,
    "?",
)
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def cache_root() -> Path:
    """Where the engine keeps what it derives from installed models (see the module doc)."""
    explicit = os.environ.get("RCP_AGENTIC_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "rcp-agentic"


def weights_digest(model_path: str, memo: Path | None = None) -> str:
    """sha256 of the model's weight files: an export belongs to exactly these weights.

    Hashing 90 MB costs a quarter of a second on every process start, so the digest is kept
    in ``memo`` (a JSON file) under each file's path, size and mtime, and computed again only
    when one of those changed."""
    files = sorted(Path(model_path).glob("*.safetensors")) + sorted(Path(model_path).glob("*.bin"))
    key = "|".join(f"{f.resolve()}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    known = _read_json(memo) if memo is not None else {}
    if isinstance(known.get(key), str):
        return str(known[key])
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    digest = h.hexdigest()
    if memo is not None:
        _write_json_atomic(memo, {**known, key: digest})
    return digest


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` under a temporary name and rename it (a reader never sees half); a
    cache that cannot be written is only slower next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".digests-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError:
        pass


class OnnxUnavailable(RuntimeError):
    """The ONNX query path cannot be used here (why is the message); torch stays in use."""


class OnnxQueryEncoder:
    """Normalised MiniLM embeddings from onnxruntime, ``threads`` intra-op threads per call."""

    def __init__(self, onnx_path: Path, tokenizer: Any, max_length: int, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.session = ort.InferenceSession(str(onnx_path), options,
                                            providers=["CPUExecutionProvider"])
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.threads = threads

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 rows, one per text."""
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="np")
        feed = {name: np.asarray(enc[name], dtype=np.int64) for name in _INPUTS}
        out = np.asarray(self.session.run(None, feed)[0], dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return np.ascontiguousarray(out / norms)


_export_lock = threading.Lock()


def load_or_export(model_path: str, torch_model: Any, *, threads: int = 1,
                   root: Path | None = None) -> OnnxQueryEncoder:
    """The encoder for the sentence-transformers model at ``model_path`` (loaded as
    ``torch_model()`` only when an export must be made and checked); OnnxUnavailable when it
    cannot be (no ``onnx`` package, an exporter error, a check that failed)."""
    from transformers import AutoTokenizer

    base = (root or cache_root()) / "onnx"
    folder = base / f"{weights_digest(model_path, base / DIGESTS_FILE)[:16]}-{EXPORT_FORMAT}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        with _export_lock:
            if not _checked(folder):
                _export(torch_model(), tokenizer, folder)
            try:
                return _open(folder, tokenizer, threads)
            except Exception:  # noqa: BLE001 - a damaged cached export: make it again, once
                shutil.rmtree(folder, ignore_errors=True)
                _export(torch_model(), tokenizer, folder)
                return _open(folder, tokenizer, threads)
    except OnnxUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - a corrupt cache, a missing tokenizer file, an ORT error
        raise OnnxUnavailable(f"the ONNX query encoder could not be loaded from {folder}: "
                              f"{type(exc).__name__}: {exc}") from exc


def _open(folder: Path, tokenizer: Any, threads: int) -> OnnxQueryEncoder:
    check = json.loads((folder / CHECK_FILE).read_text("utf-8"))
    return OnnxQueryEncoder(folder / ONNX_FILE, tokenizer, int(check["max_length"]), threads)


def _checked(folder: Path) -> bool:
    try:
        check = json.loads((folder / CHECK_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return bool(check.get("passed")) and (folder / ONNX_FILE).is_file()


def _export(model: Any, tokenizer: Any, folder: Path) -> None:
    """Export ``model`` (a SentenceTransformer) and keep it only if it matches torch."""
    import torch

    try:
        import onnx  # noqa: F401 - the TorchScript exporter needs it
    except ImportError:
        raise OnnxUnavailable("the 'onnx' package is not installed") from None
    class MeanPooled(torch.nn.Module):
        def __init__(self, transformer: Any) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                      token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
    sample = tokenizer(list(CHECK_TEXTS[:2]), padding=True, return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in _INPUTS}
    try:
        max_length = int(model.max_seq_length)
        pooled = MeanPooled(model[0].auto_model.eval()).eval()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(pooled, tuple(sample[n] for n in _INPUTS),
                              str(work / ONNX_FILE), input_names=list(_INPUTS),
                              output_names=["embedding"],
                              dynamic_axes={**axes, "embedding": {0: "batch"}},
                              opset_version=17, dynamo=False)
        encoder = OnnxQueryEncoder(work / ONNX_FILE, tokenizer, max_length)
        reference = model.encode(list(CHECK_TEXTS), normalize_embeddings=True,
                                 convert_to_numpy=True, show_progress_bar=False)
        delta = float(np.abs(encoder.encode(list(CHECK_TEXTS)) - reference).max())
    except OnnxUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - any exporter failure leaves torch in use
        shutil.rmtree(work, ignore_errors=True)
        raise OnnxUnavailable(f"exporting the model to ONNX failed: {exc}") from exc
    if not delta <= MAX_DELTA:
        shutil.rmtree(work, ignore_errors=True)
        raise OnnxUnavailable(f"the ONNX export differs from torch by {delta:.2e} "
                              f"(allowed {MAX_DELTA:.0e})")
    (work / CHECK_FILE).write_text(json.dumps({
        "passed": True, "max_delta": delta, "max_length": max_length, "texts": len(CHECK_TEXTS),
        "torch": torch.__version__, "format": EXPORT_FORMAT}), "utf-8")
    if folder.exists() and not _checked(folder):
        shutil.rmtree(folder, ignore_errors=True)  # a stale, unchecked leftover
    try:
        work.replace(folder)
    except OSError:  # another process kept its export first: use that one
        shutil.rmtree(work, ignore_errors=True)
