"""The query path of the bundled MiniLM on onnxruntime, with a fixed thread budget.

A query embedding is most of a retrieve's time. An onnxruntime session made with
``intra_op_num_threads=1`` runs each query on its caller's thread, so concurrent queries use
the server's request threads and never more, and an ingest's torch threads cannot take a
thread team from them (:mod:`.threads`). The same weights are exported once (torch's
TorchScript exporter) into ``<cache>/onnx/<weights sha256[:16]>-<EXPORT_FORMAT>/``, checked
against the torch model on :data:`CHECK_TEXTS` (at most :data:`MAX_DELTA` apart) before they
are kept, and written under a temporary name then renamed. A kept export is used only while
its model file is the one that passed (``check.json``: sha256, size, mtime); any mismatch
logs a warning, removes the folder and exports again, so queries never run on a model
nobody checked. The cache folder and the check in full: ``docs/internals.md``, "The ONNX
query path".
"""

from __future__ import annotations

import hashlib
import json
import logging
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
MAX_CHECK_BYTES = 64 * 1024  # a check record is ~400 bytes: anything larger is not one
MAX_DIGESTS_BYTES = 1 << 20  # past it the memo is dropped and starts again
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
# What a check record must hold, by type (bool is not taken for int).
_RECORD_FIELDS: dict[str, type] = {"passed": bool, "format": str, "weights": str,
                                   "max_length": int, "dim": int, "sha256": str, "size": int,
                                   "mtime_ns": int}

logger = logging.getLogger(__name__)


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
    known = _read_json(memo, MAX_DIGESTS_BYTES) if memo is not None else {}
    if isinstance(known.get(key), str):
        return str(known[key])
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        _hash_into(h, f)
    digest = h.hexdigest()
    if memo is not None:
        _write_json_atomic(memo, {**known, key: digest})
    return digest


def _hash_into(h: Any, path: Path) -> None:
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)


def _load_json(path: Path, cap: int) -> dict[str, Any]:
    """The JSON object in ``path``, of at most ``cap`` bytes (no more is read); ValueError
    when it is larger, not JSON or not an object, OSError when it cannot be read."""
    with path.open("rb") as fh:
        raw = fh.read(cap + 1)
    if len(raw) > cap:
        raise ValueError(f"{path.name} is larger than {cap} bytes")
    try:
        data = json.loads(raw)
    except RecursionError:  # nesting deeper than the parser's stack
        raise ValueError(f"{path.name} nests too deep") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    return data


def _read_json(path: Path, cap: int) -> dict[str, Any]:
    """:func:`_load_json`, or an empty object when that fails (a cache to build again)."""
    try:
        return _load_json(path, cap)
    except (OSError, ValueError):
        return {}


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` under a temporary name and rename it (a reader never sees half); a
    cache that cannot be written is only slower next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", dir=path.parent)
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


class FastTokenizer:
    """The model's ``tokenizer.json`` through the ``tokenizers`` library, called like a
    transformers tokenizer for :meth:`OnnxQueryEncoder.encode`: the same ids, without
    importing transformers (whose import loads torch, seconds a query need not wait)."""

    def __init__(self, model_path: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        special = _load_json(model_path / "special_tokens_map.json", MAX_CHECK_BYTES)
        pad = special.get("pad_token", "[PAD]")
        self.pad_token = pad["content"] if isinstance(pad, dict) else str(pad)
        self.pad_id = self.tokenizer.token_to_id(self.pad_token)
        if self.pad_id is None:
            raise OnnxUnavailable(f"the tokenizer has no id for its pad token {self.pad_token!r}")
        self._lock = threading.Lock()  # padding and truncation are settings of the tokenizer

    def __call__(self, texts: list[str], *, padding: bool, truncation: bool, max_length: int,
                 return_tensors: str = "np") -> dict[str, np.ndarray]:
        with self._lock:
            if truncation:
                self.tokenizer.enable_truncation(max_length=max_length)
            else:
                self.tokenizer.no_truncation()
            if padding:
                self.tokenizer.enable_padding(pad_id=self.pad_id, pad_token=self.pad_token)
            else:
                self.tokenizer.no_padding()
            rows = self.tokenizer.encode_batch(texts)
        return {"input_ids": np.array([r.ids for r in rows], dtype=np.int64),
                "attention_mask": np.array([r.attention_mask for r in rows], dtype=np.int64),
                "token_type_ids": np.array([r.type_ids for r in rows], dtype=np.int64)}


_export_lock = threading.Lock()


def load_or_export(model_path: str, torch_model: Any, *, threads: int = 1,
                   root: Path | None = None) -> OnnxQueryEncoder:
    """The encoder for the sentence-transformers model at ``model_path`` (loaded as
    ``torch_model()`` only when an export must be made and checked); OnnxUnavailable when it
    cannot be (no ``onnx`` package, an exporter error, a check that failed)."""
    base = (root or cache_root()) / "onnx"
    weights = weights_digest(model_path, base / DIGESTS_FILE)
    folder = base / f"{weights[:16]}-{EXPORT_FORMAT}"
    try:
        tokenizer = FastTokenizer(Path(model_path))
        config = _load_json(Path(model_path) / "config.json", MAX_CHECK_BYTES)
        dim = int(config["hidden_size"])
        with _export_lock:
            encoder = _reuse(folder, weights, dim, tokenizer, threads)
            if encoder is not None:
                return encoder
            from transformers import AutoTokenizer  # an export needs torch anyway

            full: Any = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
            _export(torch_model(), full, folder, weights)
            try:
                return _open_kept(folder, weights, dim, tokenizer, threads)
            except _NotKept as exc:
                shutil.rmtree(folder, ignore_errors=True)
                raise OnnxUnavailable(f"the new ONNX export in {folder} is not usable: "
                                      f"{exc}") from None
    except OnnxUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - a corrupt cache, a missing tokenizer file, an ORT error
        raise OnnxUnavailable(f"the ONNX query encoder could not be loaded from {folder}: "
                              f"{type(exc).__name__}: {exc}") from exc


class _NotKept(Exception):
    """A cached export that must not be used; the message says why."""


def _reuse(folder: Path, weights: str, dim: int, tokenizer: Any,
           threads: int) -> OnnxQueryEncoder | None:
    """The encoder of the export kept in ``folder``; None when there is none, or when it
    fails verification (then it is removed, with a warning, to be exported again)."""
    if not folder.exists():
        return None
    try:
        return _open_kept(folder, weights, dim, tokenizer, threads)
    except _NotKept as exc:
        logger.warning("the cached ONNX query model in %s is not used (%s); it is exported "
                       "again from the torch model", folder, exc)
        shutil.rmtree(folder, ignore_errors=True)
        return None


def _open_kept(folder: Path, weights: str, dim: int, tokenizer: Any,
               threads: int) -> OnnxQueryEncoder:
    """The encoder of the export in ``folder`` once its file is the checked one and gives
    ``dim``-d vectors; _NotKept otherwise."""
    record = _kept_record(folder, weights)
    try:
        encoder = OnnxQueryEncoder(folder / ONNX_FILE, tokenizer, record["max_length"], threads)
        shape = encoder.encode([CHECK_TEXTS[-1]]).shape
    except Exception as exc:  # noqa: BLE001 - onnxruntime cannot load or run the file
        raise _NotKept(f"onnxruntime cannot run it: {type(exc).__name__}: {exc}") from None
    if shape != (1, dim):
        raise _NotKept(f"its vectors have shape {shape}, the model's {(1, dim)}")
    return encoder


def _kept_record(folder: Path, weights: str) -> dict[str, Any]:
    """The check record of the export in ``folder``, once its model file is shown to be the
    one that passed: the recorded size and mtime, else the recorded sha256 (then the record
    takes the new mtime, so the next open is cheap again). _NotKept says why not."""
    try:
        record = _load_json(folder / CHECK_FILE, MAX_CHECK_BYTES)
    except (OSError, ValueError) as exc:
        raise _NotKept(f"its check record cannot be read: {exc}") from None
    for name, kind in _RECORD_FIELDS.items():
        if type(record.get(name)) is not kind:
            raise _NotKept(f"its check record has no valid {name!r}")
    if not record["passed"] or record["format"] != EXPORT_FORMAT or record["weights"] != weights:
        raise _NotKept("its check record is not a passed check of these weights")
    try:
        stat = (folder / ONNX_FILE).stat()
        if stat.st_size != record["size"]:
            raise _NotKept(f"its model file has {stat.st_size} bytes, the checked one "
                           f"{record['size']}")
        if stat.st_mtime_ns != record["mtime_ns"]:
            if _file_facts(folder / ONNX_FILE)["sha256"] != record["sha256"]:
                raise _NotKept("its model file's sha256 is not the checked one's")
            record = {**record, "mtime_ns": stat.st_mtime_ns}
            _write_json_atomic(folder / CHECK_FILE, record)
    except OSError as exc:
        raise _NotKept(f"its model file cannot be read: {exc}") from None
    return record


def _is_kept(folder: Path, weights: str) -> bool:
    try:
        _kept_record(folder, weights)
    except _NotKept:
        return False
    return True


def _file_facts(path: Path) -> dict[str, Any]:
    """What a check record holds of a model file: size and mtime (stat before reading, so a
    write during the hash shows as a change next time) and sha256."""
    stat = path.stat()
    h = hashlib.sha256()
    _hash_into(h, path)
    return {"sha256": h.hexdigest(), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _export(model: Any, tokenizer: Any, folder: Path, weights: str) -> None:
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
        "torch": torch.__version__, "format": EXPORT_FORMAT, "weights": weights,
        "dim": int(reference.shape[1]), **_file_facts(work / ONNX_FILE)}), "utf-8")
    if folder.exists() and not _is_kept(folder, weights):
        shutil.rmtree(folder, ignore_errors=True)  # a stale, unchecked leftover
    try:
        work.replace(folder)
    except OSError:  # another process kept its export first: use that one
        shutil.rmtree(work, ignore_errors=True)
