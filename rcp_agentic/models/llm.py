"""One way to ask a framework LLM a question: a LangChain chat model / Runnable or a LlamaIndex LLM.

:class:`ChatLLM` sends a system instruction and a user turn and returns the reply
text. It is used by the LLM judge (rerank) and the corrective loop (query
rewriting). A failing LLM raises :class:`~rcp_agentic.errors.BackendUnavailable`.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import BackendUnavailable

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


class ChatLLM:
    """A LangChain chat model / Runnable or a LlamaIndex LLM behind ``ask(system, user) -> str``.

    LangChain calls go through ``batch`` with ``max_concurrency``; LlamaIndex calls use
    ``chat`` for chat models, else ``complete``, on a small thread pool.
    """

    def __init__(self, llm: Any, *, concurrency: int = 4) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        mro = mro_names(llm)
        if LI_LLM in mro or (LC_RUNNABLE not in mro and (hasattr(llm, "complete")
                                                        or hasattr(llm, "chat"))):
            self.kind = "llamaindex"
        elif LC_RUNNABLE in mro or callable(getattr(llm, "invoke", None)):
            self.kind = "langchain"
        else:
            raise TypeError(f"cannot use {type(llm).__name__} as an LLM: pass a LangChain chat "
                            "model / Runnable or a LlamaIndex LLM")
        self.llm = llm
        self.concurrency = concurrency
        self.identity = self._identity()

    def _identity(self) -> str:
        cls = type(self.llm)
        name = None
        if self.kind == "llamaindex":
            try:
                name = self.llm.metadata.model_name
            except Exception:  # noqa: BLE001 - metadata is user code; identity must not fail
                name = None
            if name == "unknown":
                name = None
        else:
            for attr in ("model_name", "model", "model_id"):
                value = getattr(self.llm, attr, None)
                if isinstance(value, str) and value:
                    name = value
                    break
        return f"llm:{self.kind}:{cls.__module__}.{cls.__qualname__}" + (f":{name}" if name else "")

    def ask(self, system: str, user: str) -> str:
        """The reply text to one user turn."""
        return self.ask_many(system, [user])[0]

    def ask_many(self, system: str, users: list[str]) -> list[str]:
        """Reply texts to several independent user turns, in order."""
        if not users:
            return []
        try:
            replies = (self._langchain(system, users) if self.kind == "langchain"
                       else self._llamaindex(system, users))
        except BackendUnavailable:
            raise
        except Exception as exc:
            raise BackendUnavailable(f"LLM {self.identity} failed: {type(exc).__name__}: {exc}",
                                     model=self.identity) from exc
        return [message_text(reply) for reply in replies]

    def _langchain(self, system: str, users: list[str]) -> list[Any]:
        from langchain_core.messages import HumanMessage, SystemMessage

        inputs = [[SystemMessage(content=system), HumanMessage(content=user)] for user in users]
        batch = getattr(self.llm, "batch", None)
        if callable(batch):
            return list(batch(inputs, config={"max_concurrency": self.concurrency}))
        return self._pool(self.llm.invoke, inputs)

    def _llamaindex(self, system: str, users: list[str]) -> list[Any]:
        metadata = getattr(self.llm, "metadata", None)
        use_chat = bool(getattr(metadata, "is_chat_model", False)) or not hasattr(self.llm,
                                                                                 "complete")
        if use_chat:
            from llama_index.core.llms import ChatMessage, MessageRole

            def ask(user: str) -> Any:
                return self.llm.chat([ChatMessage(role=MessageRole.SYSTEM, content=system),
                                      ChatMessage(role=MessageRole.USER, content=user)])
        else:
            def ask(user: str) -> Any:
                return self.llm.complete(f"{system}\n\n{user}")
        return self._pool(ask, users)

    def _pool(self, fn: Any, inputs: list[Any]) -> list[Any]:
        if self.concurrency == 1 or len(inputs) == 1:
            return [fn(item) for item in inputs]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(inputs)),
                                thread_name_prefix="rcp-llm") as pool:
            return list(pool.map(fn, inputs))
