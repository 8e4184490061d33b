"""An OpenAI-compatible chat endpoint named without code: a base URL, a model and the name
of the environment variable that holds its key (a hosted API, Ollama, vLLM, llama.cpp's
server, LM Studio all speak it).

The key is read from the environment when the endpoint opens and never written anywhere:
``config.json`` keeps the variable's name only. Calls go through the ``openai`` SDK with
its own retries off (the engine's door, :class:`~.llm.ChatLLM`, retries and counts them)
and the server's ``usage`` read back. Install it with ``pip install "rcp-agentic[llm]"``.
"""

from __future__ import annotations

import os
from typing import Any

from .llm import Reply

DEFAULT_KEY_ENV = "OPENAI_API_KEY"


class OpenAIEndpoint:
    """Chat completions of ``model`` at ``base_url`` (e.g. ``http://127.0.0.1:8080/v1``)."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_tokens: int = 512, temperature: float = 0.0,
                 timeout_seconds: float = 120.0) -> None:
        try:
            import openai
        except ImportError as exc:
            raise ImportError("an LLM endpoint needs the openai package: "
                              'pip install "rcp-agentic[llm]"') from exc
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"llm_base_url must be an http(s) URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        # A local server wants no key; the SDK insists on a non-empty one.
        self._client = openai.OpenAI(base_url=self.base_url, api_key=api_key or "unused",
                                     timeout=timeout_seconds, max_retries=0)

    def __repr__(self) -> str:
        return f"OpenAIEndpoint({self.base_url!r}, model={self.model!r})"

    def chat_reply(self, system: str, user: str) -> Reply:
        """One chat completion: its text and the server's token counts (0 when unreported)."""
        out: Any = self._client.chat.completions.create(
            model=self.model, max_tokens=self.max_tokens, temperature=self.temperature,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        text = ""
        if out.choices:
            text = out.choices[0].message.content or ""
        usage = getattr(out, "usage", None)
        return Reply(text, int(getattr(usage, "prompt_tokens", 0) or 0),
                     int(getattr(usage, "completion_tokens", 0) or 0))


def endpoint_from_config(config: Any) -> OpenAIEndpoint | None:
    """The endpoint ``config`` names (``llm_base_url`` + ``llm_model``), or None."""
    if not config.llm_base_url:
        return None
    if not config.llm_model:
        raise ValueError("llm_base_url is set but llm_model is not: name the model to call")
    return OpenAIEndpoint(config.llm_base_url, config.llm_model,
                          api_key=os.environ.get(config.llm_api_key_env) or None,
                          max_tokens=config.llm_max_tokens, temperature=config.llm_temperature,
                          timeout_seconds=config.llm_timeout_seconds)
