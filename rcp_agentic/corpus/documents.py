"""Turning one source document into the units the engine stores: chunks, pages and the whole document.

Chunk and page vectors come from the embedder; a page's and a document's vector is
the normalised mean of the vectors of the chunks inside it, so ingest embeds each
piece of text once.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidParams
from ..analyzer import term_counts
from ..models.tokenizer import count_tokens
from ..text import clean_text, is_unicode
from ..store.writes import DocumentRecord, UnitRecord
from ..vocabulary import TRUST_LEVELS
from .chunker import chunk_text
from .source import Page, SourceDocument

MAX_ID_LENGTH = 512


def mint_id(text: str) -> str:
    """A stable id for a document given without one: a hash of its text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def check_document_chars(text: str, max_chars: int, field: str) -> None:
    """Refuse a document text longer than ``max_chars`` (EngineConfig.max_document_chars).

    Raises InvalidParams on ``field`` (e.g. ``documents[3].text``); ``index_paths``
    turns it into a skipped file with its reason.
    """
    if len(text) > max_chars:
        raise InvalidParams(f"{field} has {len(text)} characters, more than the limit of "
                            f"{max_chars} (max_document_chars)", field=field)


def to_source_document(item: Any, position: int) -> tuple[SourceDocument, str | None]:
    """Validate one ``add_documents`` item: a mapping ``{id?, text, title?, meta?, trust?}`` or a
    SourceDocument. Returns the document and the trust level the item asked for, if any."""
    requested = None
    if isinstance(item, SourceDocument):
        doc = item
    elif isinstance(item, Mapping):
        where = f"documents[{position}]"
        text = item.get("text")
        if not isinstance(text, str):
            raise InvalidParams(f"{where}.text must be a string", field=f"{where}.text")
        meta = item.get("meta", item.get("metadata")) or {}
        if not isinstance(meta, Mapping):
            raise InvalidParams(f"{where}.meta must be an object", field=f"{where}.meta")
        for key in ("id", "title", "source", "uri"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise InvalidParams(f"{where}.{key} must be a string", field=f"{where}.{key}")
        doc = SourceDocument(id=item.get("id"), text=text, title=item.get("title"),
                             source=item.get("source"), meta=dict(meta))
        requested = item.get("trust")
        if requested is not None and requested not in TRUST_LEVELS:
            raise InvalidParams(f"{where}.trust must be one of {', '.join(TRUST_LEVELS)}",
                                field=f"{where}.trust")
        if item.get("uri"):
            doc.meta.setdefault("uri", item["uri"])
    else:
        raise InvalidParams(f"documents[{position}] must be an object with 'text'",
                            field=f"documents[{position}]")
    where = f"documents[{position}]"
    # Lone surrogates (legal JSON escapes, not Unicode) become U+FFFD, as in a query.
    doc.text = clean_text(doc.text)
    doc.title = clean_text(doc.title) if doc.title is not None else None
    doc.source = clean_text(doc.source) if doc.source is not None else None
    if not doc.text.strip():
        raise InvalidParams(f"{where}.text is empty", field=f"{where}.text")
    if doc.id is not None and (not doc.id or len(doc.id) > MAX_ID_LENGTH
                               or any(ord(c) < 32 for c in doc.id) or not is_unicode(doc.id)):
        raise InvalidParams(f"{where}.id must be 1–{MAX_ID_LENGTH} printable characters",
                            field=f"{where}.id")
    try:
        meta_json = json.dumps(doc.meta, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidParams(f"{where}.meta must be JSON (finite numbers, strings, arrays, "
                            f"objects): {exc}", field=f"{where}.meta") from None
    if clean_text(meta_json) != meta_json:  # rare: clean every key and string of meta
        doc.meta = json.loads(clean_text(meta_json))
    return doc, requested


def _pages_of(pages: list[Page], start: int, end: int) -> tuple[int | None, int | None]:
    hit = [p.number for p in pages if p.start < max(end, start + 1) and p.end > start]
    return (min(hit), max(hit)) if hit else (None, None)


def _mean_vector(vectors: list[np.ndarray], dim: int) -> np.ndarray:
    if not vectors:
        return np.zeros(dim, dtype=np.float32)
    v = np.mean(vectors, axis=0).astype(np.float32)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


UNIT_SUFFIX = {"chunk": "#c", "page": "#p"}


def unit_id(doc_id: str, unit: str = "document", index: int | None = None) -> str:
    """A unit's id: ``doc:<docId>`` (document), ``doc:<docId>#p<n>`` (page), ``…#c<i>`` (chunk)."""
    base = f"doc:{doc_id}"
    if unit == "document":
        return base
    if unit not in UNIT_SUFFIX or index is None:
        raise ValueError(f"no unit id for unit {unit!r} with index {index!r}")
    return f"{base}{UNIT_SUFFIX[unit]}{index}"


def build_record(doc: SourceDocument, *, chunk_size: int, chunk_overlap: int,
                 fmeta: dict[str, Any], trust: str = "community"
                 ) -> tuple[DocumentRecord, list[str]]:
    """The document's record with chunk, page and document units (vectors still empty).

    Returns the record and the chunk texts to embed, in unit order.
    """
    doc_id = doc.id or mint_id(doc.text)
    base = unit_id(doc_id)
    uri = doc.meta.get("uri") if isinstance(doc.meta.get("uri"), str) else None
    if uri is None and doc.source and doc.file_type:
        path, _, line = doc.source.partition("#L")
        uri = Path(path).resolve().as_uri() + (f"#L{line}" if line else "")
    record = DocumentRecord(
        id=doc_id, text=doc.text, title=doc.title, source=doc.source or doc_id, uri=uri,
        file_type=doc.file_type, meta=doc.meta, fmeta=fmeta,
        pages=[(p.number, p.start, p.end) for p in doc.pages] if doc.pages else None,
        modified_ms=doc.modified * 1000.0 if doc.modified is not None else None,
        trust=trust)
    empty = np.zeros(0, dtype=np.float32)
    texts: list[str] = []
    # Paged sources are chunked page by page: a chunk cites exactly one page, and a
    # page's vector is the mean of the chunks it holds.
    spans = [(p.start, p.end) for p in doc.pages] or [(0, len(doc.text))]
    for span_start, span_end in spans:
        for c in chunk_text(doc.text[span_start:span_end], chunk_size, chunk_overlap):
            start, end, index = span_start + c.start, span_start + c.end, len(texts)
            ps, pe = _pages_of(doc.pages, start, end)
            counts, n = term_counts(c.text)
            record.units.append(UnitRecord(unit_id(doc_id, "chunk", index), "chunk", 0, index, start, end,
                                           ps, pe, c.tokens, c.text, empty, dict(counts), n))
            texts.append(c.text)
    for p in doc.pages:
        body = doc.text[p.start:p.end]
        if not body.strip():
            continue
        counts, n = term_counts(body)
        record.units.append(UnitRecord(unit_id(doc_id, "page", p.number), "page", 0, p.number, p.start, p.end,
                                       p.number, p.number, count_tokens(body), body, empty,
                                       dict(counts), n))
    counts, n = term_counts(doc.text)
    first, last = (doc.pages[0].number, doc.pages[-1].number) if doc.pages else (None, None)
    record.units.append(UnitRecord(base, "document", 0, 0, 0, len(doc.text), first, last,
                                   count_tokens(doc.text), doc.text, empty, dict(counts), n))
    return record, texts


def attach_vectors(record: DocumentRecord, chunk_vectors: np.ndarray) -> None:
    """Give chunks their vectors, and pages/the document the mean of the chunks they contain."""
    dim = chunk_vectors.shape[1] if chunk_vectors.ndim == 2 and len(chunk_vectors) else 0
    chunks = [u for u in record.units if u.unit == "chunk"]
    for u, v in zip(chunks, chunk_vectors):
        u.vector = v
    for u in record.units:
        if u.unit == "chunk":
            continue
        inside = [c.vector for c in chunks
                  if c.start is not None and u.start is not None and u.end is not None
                  and c.start < u.end and c.end is not None and c.end > u.start]
        u.vector = _mean_vector(inside, dim)
        if not math.isfinite(float(u.vector.sum())):
            raise ValueError(f"non-finite vector for {u.uid}")
