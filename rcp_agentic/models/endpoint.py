"""An OpenAI-compatible chat endpoint named without code: a base URL, a model and the name
of the environment variable that holds its key (a hosted API, Ollama, vLLM, llama.cpp's
server, LM Studio all speak it).

The endpoint is upstream input like any other, so one call runs under a total deadline, not
a per-read timeout, and stops as soon as its caller gives up; reads at most
``max_reply_bytes`` of the reply, uncompressed, and at most ``max_tokens`` of completion (a
reply claiming more is refused); and fails with :class:`EndpointError`, which carries the
HTTP status and reason phrase and never a byte of the server's body (gateways echo request
headers, the key among them, into their error pages). The key is read from the environment
when the endpoint opens and never written anywhere (``config.json`` keeps the variable's
name). Retries and counting are :class:`~.llm.ChatLLM`'s; this is one request and one reply
over ``httpx``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import httpx

from ..config import credential_part
from .llm_reply import Reply

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_MAX_REPLY_BYTES = 1 << 20


class EndpointError(Exception):
    """A failed call: ``status_code`` (None: no HTTP answer) and a short reason that holds
    nothing the server sent; ``retry_after`` is the server's hint in seconds, if any."""

    def __init__(self, reason: str, *, status_code: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.status_code = status_code
        self.retry_after = retry_after


class ReplyTooLarge(EndpointError):
    """The reply passed the byte or token cap (not retried: the same question gets the same
    answer)."""


def _status_reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "non-standard status"


def _retry_after(headers: httpx.Headers) -> float | None:
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / scale)
        except ValueError:
            return None  # an HTTP date: the door's backoff applies
    return None


def refuse_credentials(base_url: str) -> None:
    """Refuse a URL carrying credentials (:func:`~rcp_agentic.config.credential_part`): keys
    come from the environment only. The message names the part, never its value."""
    part = credential_part(base_url)
    if part is not None:
        raise ValueError(f"llm_base_url must not carry credentials ({part}): put the key in "
                         "the environment variable named by llm_api_key_env")


class OpenAIEndpoint:
    """Chat completions of ``model`` at ``base_url`` (e.g. ``http://127.0.0.1:8080/v1``)."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_tokens: int = 512, temperature: float = 0.0,
                 timeout_seconds: float = 120.0,
                 max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError("llm_base_url must be an http(s) URL")
        refuse_credentials(base_url)
        if max_reply_bytes < 1024:
            raise ValueError("max_reply_bytes must be at least 1024")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.timeout_seconds = timeout_seconds
        self.max_reply_bytes = max_reply_bytes
        self._secrets = (api_key,) if api_key else ()
        headers = {"Accept-Encoding": "identity", "Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # No redirects (a key must not follow one) and no proxies from the environment.
        self._client = httpx.Client(headers=headers, follow_redirects=False, trust_env=False)

    def __repr__(self) -> str:
        return f"OpenAIEndpoint({self.base_url!r}, model={self.model!r})"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The credentials this endpoint holds (for the door to mask in any message)."""
        return self._secrets

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def chat_reply(self, system: str, user: str, *, deadline: float | None = None,
                   cancelled: Callable[[], bool] | None = None) -> Reply:
        """One chat completion: its text and the server's token counts (0 when unreported).
        ``deadline`` is a ``time.monotonic()`` instant the whole call ends by; ``cancelled``
        is polled between reads."""
        end = time.monotonic() + self.timeout_seconds
        if deadline is not None:
            end = min(end, deadline)
        body = {"model": self.model, "max_tokens": self.max_tokens,
                "temperature": self.temperature,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": user}]}
        raw = self._post(json.dumps(body).encode("utf-8"), end, cancelled)
        return self._parse(raw)

    def _post(self, body: bytes, end: float, cancelled: Callable[[], bool] | None) -> bytes:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError("no time left for the LLM call")
        try:
            with self._client.stream("POST", self.base_url + "/chat/completions",
                                     content=body, timeout=httpx.Timeout(left)) as response:
                if response.status_code >= 400:
                    raise EndpointError(
                        f"HTTP {response.status_code} {_status_reason(response.status_code)}",
                        status_code=response.status_code,
                        retry_after=_retry_after(response.headers))
                encoding = response.headers.get("content-encoding", "identity").lower()
                if encoding not in ("", "identity"):
                    raise EndpointError(f"the endpoint sent a {encoding!r}-encoded reply; "
                                        "only uncompressed replies are read")
                return self._read(response, end, cancelled)
        except httpx.TimeoutException:
            raise TimeoutError("no reply from the LLM endpoint before the deadline") from None
        except httpx.TransportError as exc:
            # httpx's message names the failure (refused, reset); the URL is ours, not theirs.
            raise ConnectionError(f"{type(exc).__name__} talking to the LLM endpoint") from None

    def _read(self, response: httpx.Response, end: float,
              cancelled: Callable[[], bool] | None) -> bytes:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_raw():  # as it arrives: a chunk size would buffer a drip
            size += len(chunk)
            if size > self.max_reply_bytes:
                raise ReplyTooLarge(f"the reply passed the {self.max_reply_bytes}-byte cap")
            chunks.append(chunk)
            if time.monotonic() > end:
                raise TimeoutError("the reply did not finish before the deadline")
            if cancelled is not None and cancelled():
                raise TimeoutError("the caller gave up on the LLM call")
        return b"".join(chunks)

    def _parse(self, raw: bytes) -> Reply:
        try:
            out: Any = json.loads(raw)
            choice = out["choices"][0]
            text = choice["message"]["content"] or ""
            if not isinstance(text, str):
                raise TypeError
        except (ValueError, KeyError, IndexError, TypeError):
            raise EndpointError("the endpoint's reply is not a chat completion") from None
        usage = out.get("usage") if isinstance(out.get("usage"), dict) else {}
        prompt, completion = (_count(usage.get("prompt_tokens")),
                              _count(usage.get("completion_tokens")))
        if completion > self.max_tokens:
            raise ReplyTooLarge(f"the reply claims {completion} completion tokens, more than "
                                f"the {self.max_tokens} asked for")
        return Reply(text, prompt, completion)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def endpoint_from_config(config: Any) -> OpenAIEndpoint | None:
    """The endpoint ``config`` names (``llm_base_url`` + ``llm_model``), or None."""
    if not config.llm_base_url:
        return None
    if not config.llm_model:
        raise ValueError("llm_base_url is set but llm_model is not: name the model to call")
    return OpenAIEndpoint(config.llm_base_url, config.llm_model,
                          api_key=os.environ.get(config.llm_api_key_env) or None,
                          max_tokens=config.llm_max_tokens, temperature=config.llm_temperature,
                          timeout_seconds=config.llm_timeout_seconds,
                          max_reply_bytes=config.llm_max_reply_bytes)
