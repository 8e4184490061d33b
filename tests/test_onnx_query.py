"""The ONNX query path: exported once from the bundled MiniLM, checked against torch, cached,
and equal to torch's query vectors within 1e-5 on texts the check never saw; a cached model
file that is not the one checked is never used."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcp_agentic.models.embedder import SentenceTransformerEmbedder
from rcp_agentic.models.onnx_query import (CHECK_FILE, CHECK_TEXTS, DIGESTS_FILE,
                                           MAX_CHECK_BYTES, MAX_DELTA, ONNX_FILE,
                                           OnnxQueryEncoder, OnnxUnavailable, load_or_export,
                                           weights_digest)

LOGGER = "rcp_agentic.models.onnx_query"


@pytest.fixture(scope="module")
def torch_embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(query_backend="torch", torch_threads=1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory,
          torch_embedder: SentenceTransformerEmbedder) -> Path:
    root = tmp_path_factory.mktemp("onnx-cache")
    load_or_export(torch_embedder.model_path, torch_embedder._load, root=root)
    return root


def _folder(root: Path) -> Path:
    (folder,) = (p for p in (root / "onnx").iterdir() if p.is_dir())
    return folder


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _kept_copy(cache: Path, root: Path) -> Path:
    """The module's kept export copied (mtimes too) into the cache ``root``."""
    kept = root / "onnx" / _folder(cache).name
    shutil.copytree(_folder(cache), kept)
    return kept


def _refuse_torch() -> None:
    raise AssertionError("torch was asked for an export")


def test_the_export_is_kept_with_its_check(cache: Path) -> None:
    folder = _folder(cache)
    check = json.loads((folder / CHECK_FILE).read_text("utf-8"))
    model = folder / ONNX_FILE
    assert model.stat().st_size > 1_000_000
    assert check["passed"] is True and 0 <= check["max_delta"] <= MAX_DELTA
    assert check["texts"] == len(CHECK_TEXTS) and check["max_length"] == 256
    assert check["sha256"] == _sha256(model) and check["size"] == model.stat().st_size
    assert check["mtime_ns"] == model.stat().st_mtime_ns and check["dim"] == 384
    assert folder.name.startswith(check["weights"][:16])
    assert not [p for p in (cache / "onnx").iterdir() if p.name.startswith(".export-")]


def test_a_kept_export_is_reused_without_loading_torch(cache: Path,
                                                       torch_embedder: SentenceTransformerEmbedder
                                                       ) -> None:
    def no_torch() -> None:
        raise AssertionError("the kept export should have been used")

    encoder = load_or_export(torch_embedder.model_path, no_torch, root=cache)
    assert encoder.threads == 1
    assert encoder.encode(["bone loss"]).shape == (1, 384)


def test_an_unchecked_leftover_is_exported_again(tmp_path: Path, cache: Path,
                                                 torch_embedder: SentenceTransformerEmbedder
                                                 ) -> None:
    stale = tmp_path / "onnx" / _folder(cache).name
    stale.mkdir(parents=True)
    (stale / ONNX_FILE).write_bytes(b"half a file")  # no check file: never trusted
    encoder = load_or_export(torch_embedder.model_path, torch_embedder._load, root=tmp_path)
    ref = torch_embedder.embed_documents(["bone loss"])
    assert float(np.abs(encoder.encode(["bone loss"]) - ref).max()) <= MAX_DELTA
    assert json.loads((stale / CHECK_FILE).read_text("utf-8"))["passed"] is True


def test_a_model_the_exporter_cannot_take_leaves_torch_in_use(tmp_path: Path,
                                                              torch_embedder:
                                                              SentenceTransformerEmbedder
                                                              ) -> None:
    class NotAModel:
        max_seq_length = 256

        def __getitem__(self, i: int) -> None:
            raise TypeError("not a sentence-transformers model")

    with pytest.raises(OnnxUnavailable, match="exporting the model to ONNX failed"):
        load_or_export(torch_embedder.model_path, NotAModel, root=tmp_path)
    left = [p.name for p in (tmp_path / "onnx").iterdir()]
    assert left == [DIGESTS_FILE]  # nothing half-made is left, only the weights' digest


def test_a_damaged_kept_export_is_made_again(tmp_path: Path, cache: Path,
                                             torch_embedder: SentenceTransformerEmbedder) -> None:
    kept = tmp_path / "onnx" / _folder(cache).name
    shutil.copytree(_folder(cache), kept)
    (kept / ONNX_FILE).write_bytes(b"not a model any more")  # its check still says passed
    encoder = load_or_export(torch_embedder.model_path, torch_embedder._load, root=tmp_path)
    ref = torch_embedder.embed_documents(["bone loss"])
    assert float(np.abs(encoder.encode(["bone loss"]) - ref).max()) <= MAX_DELTA
    assert (kept / ONNX_FILE).stat().st_size > 1_000_000


def _tiny_onnx(path: Path, dim: int) -> None:
    """A valid ONNX model with the export's inputs and output, of ``dim``-d vectors that are
    not MiniLM's: a token embedding, mean-pooled."""
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = torch.nn.Embedding(1000, dim)
            self.types = torch.nn.Embedding(2, dim)

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.tokens(input_ids % 1000) + self.types(token_type_ids)
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = tuple(torch.ones((1, 4), dtype=torch.int64) for _ in names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(Tiny().eval(), sample, str(path), input_names=names,
                          output_names=["embedding"],
                          dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names},
                                        "embedding": {0: "batch"}},
                          opset_version=17, dynamo=False)


def _perturbed_copy(model: Path) -> None:
    """Negate the word embeddings of the model in place: a valid model of the same size and
    output whose vectors are not MiniLM's."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(model))
    words = max(proto.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    words.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(words), words.name))
    onnx.save(proto, str(model))


def test_a_different_model_of_the_same_size_is_not_used(tmp_path: Path, cache: Path,
                                                        torch_embedder:
                                                        SentenceTransformerEmbedder,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    kept = _kept_copy(cache, tmp_path)
    size = (kept / ONNX_FILE).stat().st_size
    _perturbed_copy(kept / ONNX_FILE)
    assert (kept / ONNX_FILE).stat().st_size == size  # only the hash tells it apart
    ref = torch_embedder.embed_documents(["bone loss"])
    swapped = OnnxQueryEncoder(kept / ONNX_FILE, _tokenizer(torch_embedder), 256)
    assert float(np.abs(swapped.encode(["bone loss"]) - ref).max()) > 0.05
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        encoder = load_or_export(torch_embedder.model_path, torch_embedder._load, root=tmp_path)
    assert float(np.abs(encoder.encode(["bone loss"]) - ref).max()) <= MAX_DELTA
    assert "sha256" in caplog.text
    assert json.loads((kept / CHECK_FILE).read_text("utf-8"))["sha256"] == _sha256(
        kept / ONNX_FILE)


def _tokenizer(embedder: SentenceTransformerEmbedder) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedder.model_path, local_files_only=True)


def test_queries_never_run_on_a_cached_model_of_another_dimension(
        tmp_path: Path, cache: Path, torch_embedder: SentenceTransformerEmbedder,
        monkeypatch: pytest.MonkeyPatch) -> None:
    kept = _kept_copy(cache, tmp_path)
    _tiny_onnx(kept / ONNX_FILE, 128)
    monkeypatch.setenv("RCP_AGENTIC_CACHE", str(tmp_path))
    embedder = SentenceTransformerEmbedder(torch_threads=1)
    vec = embedder.embed_query("what causes bone loss")
    ref = torch_embedder.embed_query("what causes bone loss")
    assert vec.shape == (384,) and float(np.abs(vec - ref).max()) <= MAX_DELTA
    assert embedder.query_path.startswith("onnx")  # exported again, checked, in use


def _forge_check(kept: Path, **changes: Any) -> None:
    """Rewrite the kept check record so it describes the model file now in ``kept``."""
    model = kept / ONNX_FILE
    record = json.loads((kept / CHECK_FILE).read_text("utf-8"))
    record.update(sha256=_sha256(model), size=model.stat().st_size,
                  mtime_ns=model.stat().st_mtime_ns, **changes)
    (kept / CHECK_FILE).write_text(json.dumps(record), "utf-8")


def test_a_model_of_another_dimension_is_refused_even_with_a_matching_record(
        tmp_path: Path, cache: Path, torch_embedder: SentenceTransformerEmbedder,
        caplog: pytest.LogCaptureFixture) -> None:
    kept = _kept_copy(cache, tmp_path)
    _tiny_onnx(kept / ONNX_FILE, 128)
    _forge_check(kept)
    with caplog.at_level(logging.WARNING, logger=LOGGER), \
            pytest.raises(OnnxUnavailable, match="torch was asked"):
        load_or_export(torch_embedder.model_path, _refuse_torch, root=tmp_path)
    assert "shape (1, 128)" in caplog.text and not kept.exists()


def _old_record(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("sha256", "size", "mtime_ns", "dim",
                                                          "weights")}


@pytest.mark.parametrize("garble", [
    _old_record,  # a record of before the file's hash was kept
    lambda r: {**r, "size": str(r.get("size", 0))},
    lambda r: {**r, "padding": "x" * MAX_CHECK_BYTES},  # valid, but past the size cap
], ids=["without-hash", "size-as-text", "oversized"])
def test_a_record_that_cannot_vouch_for_the_file_is_not_trusted(
        tmp_path: Path, cache: Path, torch_embedder: SentenceTransformerEmbedder,
        caplog: pytest.LogCaptureFixture, garble: Any) -> None:
    kept = _kept_copy(cache, tmp_path)
    record = json.loads((kept / CHECK_FILE).read_text("utf-8"))
    (kept / CHECK_FILE).write_text(json.dumps(garble(record)), "utf-8")
    with caplog.at_level(logging.WARNING, logger=LOGGER), \
            pytest.raises(OnnxUnavailable, match="torch was asked"):
        load_or_export(torch_embedder.model_path, _refuse_torch, root=tmp_path)
    assert "check record" in caplog.text


def test_a_touched_but_identical_model_is_hashed_again_and_used(
        tmp_path: Path, cache: Path, torch_embedder: SentenceTransformerEmbedder) -> None:
    kept = _kept_copy(cache, tmp_path)
    model = kept / ONNX_FILE
    later = model.stat().st_mtime_ns + 5_000_000_000
    os.utime(model, ns=(later, later))
    encoder = load_or_export(torch_embedder.model_path, _refuse_torch, root=tmp_path)
    ref = torch_embedder.embed_documents(["bone loss"])
    assert float(np.abs(encoder.encode(["bone loss"]) - ref).max()) <= MAX_DELTA
    # The hash matched: the record takes the new mtime, so the next open does not hash.
    assert json.loads((kept / CHECK_FILE).read_text("utf-8"))["mtime_ns"] == later


def test_a_model_without_its_tokenizer_leaves_torch_in_use(tmp_path: Path,
                                                           torch_embedder:
                                                           SentenceTransformerEmbedder) -> None:
    weights_only = tmp_path / "model"
    weights_only.mkdir()
    for f in Path(torch_embedder.model_path).glob("*.safetensors"):
        (weights_only / f.name).symlink_to(f)
    with pytest.raises(OnnxUnavailable, match="could not be loaded"):
        load_or_export(str(weights_only), torch_embedder._load, root=tmp_path / "cache")


def test_the_weights_digest_is_remembered_until_a_file_changes(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    weights = model / "model.safetensors"
    weights.write_bytes(b"weights v1")
    memo = tmp_path / DIGESTS_FILE
    first = weights_digest(str(model), memo)
    assert weights_digest(str(model), None) == first
    # A remembered digest is read, not computed: a planted value comes back.
    planted = {key: "f" * 64 for key in json.loads(memo.read_text("utf-8"))}
    memo.write_text(json.dumps(planted), "utf-8")
    assert weights_digest(str(model), memo) == "f" * 64
    weights.write_bytes(b"weights v2, longer")  # size and mtime change: hashed again
    second = weights_digest(str(model), memo)
    assert second == weights_digest(str(model), None) != first


# Texts the check never saw: letters, digits, punctuation, spaces and non-Latin scripts,
# up to past the model's 256-token window.
_texts = st.text(st.characters(categories=("L", "N", "P", "Zs")), min_size=1, max_size=1500)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_texts)
def test_onnx_queries_match_torch_within_the_bound(cache: Path,
                                                   torch_embedder: SentenceTransformerEmbedder,
                                                   text: str) -> None:
    encoder = load_or_export(torch_embedder.model_path, torch_embedder._load, root=cache)
    ref = torch_embedder.embed_documents([text])
    got = encoder.encode([text])
    assert got.shape == ref.shape and got.dtype == np.float32
    assert float(np.abs(got - ref).max()) <= MAX_DELTA
    assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-5


def test_the_embedder_says_which_path_its_queries_take(monkeypatch: pytest.MonkeyPatch,
                                                       cache: Path,
                                                       torch_embedder: SentenceTransformerEmbedder
                                                       ) -> None:
    monkeypatch.setenv("RCP_AGENTIC_CACHE", str(cache))
    onnx = SentenceTransformerEmbedder()
    assert onnx.query_path == "not loaded"
    vec = onnx.embed_query("what causes bone loss")
    assert onnx.query_path.startswith("onnx")
    ref = torch_embedder.embed_query("what causes bone loss")
    assert torch_embedder.query_path == "torch"
    assert float(np.abs(vec - ref).max()) <= MAX_DELTA
    with pytest.raises(ValueError, match="query_backend"):
        SentenceTransformerEmbedder(query_backend="gpu")


_TOKEN_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=600)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_TOKEN_TEXT | st.sampled_from(["", " ", "word " * 400]), min_size=1,
                      max_size=6), max_length=st.sampled_from([8, 128, 256, 512]))
def test_the_light_tokenizer_gives_the_transformers_ids(texts: list[str],
                                                        max_length: int) -> None:
    # The reuse path reads tokenizer.json with `tokenizers` alone; an export (and the check
    # against torch) uses transformers' tokenizer: both must give the model the same input.
    from transformers import AutoTokenizer

    from rcp_agentic.models.onnx_query import FastTokenizer

    path = Path(SentenceTransformerEmbedder(query_backend="torch").model_path)
    light, full = _tokenizers(path, FastTokenizer, AutoTokenizer)
    ours = light(texts, padding=True, truncation=True, max_length=max_length)
    theirs = full(texts, padding=True, truncation=True, max_length=max_length,
                  return_tensors="np")
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        assert np.array_equal(ours[name], theirs[name]), name


_TOKENIZERS: dict[Path, Any] = {}


def _tokenizers(path: Path, light: Any, full: Any) -> Any:
    if path not in _TOKENIZERS:
        _TOKENIZERS[path] = (light(path), full.from_pretrained(str(path), local_files_only=True))
    return _TOKENIZERS[path]


def test_a_query_on_a_kept_export_never_imports_torch(tmp_path: Path, cache: Path) -> None:
    # A CLI query or a server's first read waits for no torch import (seconds) once the
    # export is kept: the engine opens, embeds the query on onnxruntime and answers.
    import subprocess
    import sys

    from rcp_agentic import Engine

    _kept_copy(cache, tmp_path / "cache")
    env = {**os.environ, "RCP_AGENTIC_CACHE": str(tmp_path / "cache")}
    with Engine(tmp_path / "engine") as engine:
        engine.add_documents([{"id": "a", "text": "Vitamin D and the risk of sclerosis."}])
    script = ("import sys\nfrom rcp_agentic import Engine\n"
              f"engine = Engine({str(tmp_path / 'engine')!r})\n"
              "hits = engine.retrieve('vitamin D', k=1).hits\n"
              "print(hits[0].id, 'torch' in sys.modules, 'transformers' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["doc:a#c0", "False", "False"]
