"""The ONNX query path: exported once from the bundled MiniLM, checked against torch, cached,
and equal to torch's query vectors within 1e-5 on texts the check never saw."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcp_agentic.models.embedder import SentenceTransformerEmbedder
from rcp_agentic.models.onnx_query import (CHECK_FILE, CHECK_TEXTS, DIGESTS_FILE, MAX_DELTA,
                                           ONNX_FILE, OnnxUnavailable, load_or_export,
                                           weights_digest)


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


def test_the_export_is_kept_with_its_check(cache: Path) -> None:
    folder = _folder(cache)
    check = json.loads((folder / CHECK_FILE).read_text("utf-8"))
    assert (folder / ONNX_FILE).stat().st_size > 1_000_000
    assert check["passed"] is True and 0 <= check["max_delta"] <= MAX_DELTA
    assert check["texts"] == len(CHECK_TEXTS) and check["max_length"] == 256
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
