"""Reading what an LLM framework returns, without importing the framework: the class names
that recognise LangChain and LlamaIndex objects (:func:`mro_names`), a reply's text
(:func:`message_text`) and token usage (:func:`reply_usage`), the first JSON object in a
reply (:func:`json_object`), and :class:`Reply`, one reply and what it cost."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

LC_LANGUAGE_MODEL = "langchain_core.language_models.base.BaseLanguageModel"
LC_RUNNABLE = "langchain_core.runnables.base.Runnable"
LI_LLM = "llama_index.core.base.llms.base.BaseLLM"


def mro_names(obj: Any) -> set[str]:
    """Qualified names of ``obj``'s classes (recognises frameworks without importing them)."""
    return {f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__}


def message_text(reply: Any) -> str:
    """The text of a LangChain reply (AIMessage, str) or a LlamaIndex response."""
    if isinstance(reply, str):
        return reply
    message = getattr(reply, "message", None)  # LlamaIndex ChatResponse
    if message is not None and not hasattr(reply, "content"):
        reply = message
    content = getattr(reply, "content", None)
    if content is None:
        text = getattr(reply, "text", None)  # LlamaIndex CompletionResponse
        return text if isinstance(text, str) else str(reply)
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return str(content)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def reply_usage(reply: Any) -> tuple[int | None, int | None]:
    """Prompt and completion tokens a framework reply reports (None where it does not):
    LangChain's ``usage_metadata`` / ``response_metadata.token_usage``, LlamaIndex's
    ``raw.usage`` / ``additional_kwargs``."""
    meta = getattr(reply, "usage_metadata", None)
    if meta:
        return _int(_get(meta, "input_tokens")), _int(_get(meta, "output_tokens"))
    candidates = [
        _get(getattr(reply, "response_metadata", None) or {}, "token_usage"),
        _get(getattr(reply, "raw", None), "usage"),
        getattr(reply, "additional_kwargs", None),
        _get(getattr(getattr(reply, "message", None), "additional_kwargs", None) or {}, "usage"),
    ]
    for usage in candidates:
        if usage:
            p, c = _int(_get(usage, "prompt_tokens")), _int(_get(usage, "completion_tokens"))
            if p is not None or c is not None:
                return p, c
    return None, None


def json_object(reply: str) -> dict[str, Any] | None:
    """The first JSON object in an LLM reply (inside a code fence if there is one), or None:
    models wrap JSON in prose and fences however they are asked."""
    text = reply.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fence:
        text = fence.group(1)
    decoder = json.JSONDecoder()
    pos = text.find("{")
    while pos >= 0:
        try:
            data, _end = decoder.raw_decode(text, pos)
        except ValueError:
            pos = text.find("{", pos + 1)
            continue
        if isinstance(data, dict):
            return data
        pos = text.find("{", pos + 1)
    return None


@dataclass(frozen=True)
class Reply:
    """One reply and what it cost."""

    text: str
    prompt_tokens: int
    completion_tokens: int
