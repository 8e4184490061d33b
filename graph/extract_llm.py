"""GraphRAG-style entity and relation extraction through a chat model.

:class:`LLMExtractor` asks :class:`~rcp_agentic.models.llm.ChatLLM` for the entities and
typed relations of each chunk; :func:`parse_llm_reply` reads a reply (JSON or GraphRAG's
tuple format), skipping what is malformed. A chunk whose reply is unparseable gets the
builtin rules' mentions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..models.llm import as_chat
from ..models.llm_reply import json_object
from ..models.llm_guard import DATA_RULE, data_block
from .extract import ChunkExtraction, RawMention, RawRelation, sentence_of, sentence_spans
from .extract_rules import BuiltinExtractor
from .model import ChunkText

LLM_SYSTEM = ("You extract a knowledge graph from a passage. Use only facts stated in the "
              "passage. " + DATA_RULE + " Reply with JSON only.")
LLM_PROMPT = (
    "Extract the named entities of the passage and the relations between them.\n"
    'Reply with one JSON object: {{"entities": [{{"name": str, "type": str, '
    '"description": str}}], "relations": [{{"subject": str, "relation": str, "object": str, '
    '"description": str, "strength": number 1-10}}]}}. Types: person, organization, place, '
    "event, work, date, concept. Names exactly as written in the passage.\n\n{data}")


@dataclass
class ParsedReply:
    """Entities (name, type, description) and relations read from one LLM reply."""

    entities: list[tuple[str, str, str]] = field(default_factory=list)
    relations: list[RawRelation] = field(default_factory=list)


def _json_candidates(reply: str) -> Iterable[Any]:
    data = json_object(reply)
    if data is not None:
        yield data
    # GraphRAG's tuple format: ("entity"<|>NAME<|>TYPE<|>DESC) ("relationship"<|>S<|>O<|>DESC<|>W)
    tuples = re.findall(r"\(\s*\"?(entity|relationship)\"?\s*(?:<\|>|\|)(.*?)\)\s*(?:##|\n|$)",
                        reply, re.S | re.I)
    if tuples:
        ents, rels = [], []
        for tag, body in tuples:
            parts = [p.strip().strip('"') for p in re.split(r"<\|>|\|", body)]
            if tag.lower() == "entity" and len(parts) >= 2:
                ents.append({"name": parts[0], "type": parts[1],
                             "description": parts[2] if len(parts) > 2 else ""})
            elif tag.lower() == "relationship" and len(parts) >= 2:
                rels.append({"subject": parts[0], "object": parts[1], "relation": "related to",
                             "description": parts[2] if len(parts) > 2 else "",
                             "strength": parts[3] if len(parts) > 3 else 1})
        yield {"entities": ents, "relations": rels}


def parse_llm_reply(reply: str) -> ParsedReply:
    """Entities and relations from an LLM reply; malformed parts are skipped, never raised."""
    out = ParsedReply()
    for data in _json_candidates(reply):
        if not isinstance(data, dict):
            continue
        for e in data.get("entities") or []:
            if isinstance(e, str):
                e = {"name": e}
            if not isinstance(e, dict):
                continue
            name = " ".join(str(e.get("name") or "").split())
            if name:
                out.entities.append((name, str(e.get("type") or "entity").strip().lower()
                                     or "entity", " ".join(str(e.get("description") or "").split())))
        for r in data.get("relations") or []:
            if not isinstance(r, dict):
                continue
            s = " ".join(str(r.get("subject") or r.get("source") or "").split())
            o = " ".join(str(r.get("object") or r.get("target") or "").split())
            if not s or not o or s == o:
                continue
            try:
                strength = float(r.get("strength", r.get("weight", 1)) or 1)
            except (TypeError, ValueError):
                strength = 1.0
            out.relations.append(RawRelation(
                s, o, " ".join(str(r.get("relation") or r.get("type") or "related to").split()),
                " ".join(str(r.get("description") or "").split()),
                max(0.1, min(strength, 10.0)) / 10.0))
        if out.entities or out.relations:
            break
    return out


class LLMExtractor:
    """GraphRAG-style extraction with a LangChain chat model or LlamaIndex LLM.

    One LLM call per chunk (concurrent through ``ChatLLM.ask_many``). Entity names are
    located in the chunk text (case-insensitive); a name the passage does not contain
    is kept as a mention at the chunk's first sentence only when a relation uses it.
    Unparseable replies yield the builtin rules' mentions, so every chunk has some.
    """

    def __init__(self, llm: Any) -> None:
        self.chat = as_chat(llm)
        self.identity = f"llm/2:{self.chat.identity}"
        self.fallback = BuiltinExtractor()

    def extract(self, chunks: Sequence[ChunkText]) -> list[ChunkExtraction]:
        """One extraction per chunk, in order."""
        replies = self.chat.ask_many(LLM_SYSTEM, [LLM_PROMPT.format(data=data_block(c.text))
                                                  for c in chunks], stage="graph")
        return [self._one(c.text, reply) for c, reply in zip(chunks, replies)]

    def _one(self, text: str, reply: str) -> ChunkExtraction:
        parsed = parse_llm_reply(reply)
        if not parsed.entities and not parsed.relations:
            if reply:  # an empty reply was counted by the door already
                self.chat.fallback("graph", "unparsed")
            return self.fallback.extract_text(text)
        spans = sentence_spans(text)
        folded = text.lower()
        mentions: list[RawMention] = []
        kinds = {name.lower(): kind for name, kind, _d in parsed.entities}
        names = [n for n, _k, _d in parsed.entities]
        names += [x for r in parsed.relations for x in (r.subject, r.object)]
        seen: set[str] = set()
        for name in names:
            low = name.lower()
            if low in seen:
                continue
            seen.add(low)
            kind = kinds.get(low, "entity")
            found = [m.start() for m in re.finditer(re.escape(low), folded)]
            for pos in found:
                mentions.append(RawMention(text[pos:pos + len(name)], pos, pos + len(name),
                                           sentence_of(spans, pos), kind))
            if not found:
                mentions.append(RawMention(name, 0, 0, 0, kind))
        descriptions = tuple((n, d) for n, _k, d in parsed.entities if d)
        return ChunkExtraction(spans, tuple(sorted(mentions, key=lambda x: (x.start, -x.end))),
                               tuple(parsed.relations), descriptions)
