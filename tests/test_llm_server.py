"""The real-LLM harness itself (tests/llm_server.py): SmolLM2-135M served by xllamacpp in a
child process, behind the counting, fault-injecting proxy, driven by LangChain, LlamaIndex and
the OpenAI SDK. Every generation is capped at a few tokens."""

from __future__ import annotations


import httpx
import llm_server
import openai
import pytest
from llm_server import FaultProxy, ModelServer, require_model
from llm_server import proxy, stack  # noqa: F401 - fixtures
from openai.types.chat import ChatCompletionMessageParam
from pydantic import SecretStr

MAX_TOKENS = 8
PROMPT = "Name one city in Norway."
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]




@pytest.fixture
def server(stack: tuple[ModelServer, FaultProxy]) -> ModelServer:
    return stack[0]




def sdk(proxy: FaultProxy, max_retries: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="none", max_retries=max_retries)


def ask(client: openai.OpenAI) -> str:
    reply = client.chat.completions.create(model="smollm2", messages=MESSAGES,
                                           max_tokens=MAX_TOKENS, temperature=0)
    return reply.choices[0].message.content or ""


def test_langchain_chat_openai_through_the_proxy(proxy: FaultProxy) -> None:
    from langchain_openai import ChatOpenAI

    # max_tokens is a field's name, max_completion_tokens its alias (which mypy expects).
    llm = ChatOpenAI(base_url=proxy.base_url, api_key=SecretStr("none"),  # type: ignore[call-arg]
                     model="smollm2", max_tokens=MAX_TOKENS, temperature=0, max_retries=0)
    out = llm.invoke(PROMPT)
    assert isinstance(out.content, str) and out.content.strip()
    assert out.usage_metadata is not None and 0 < out.usage_metadata["output_tokens"] <= MAX_TOKENS
    [record] = proxy.chat_requests()
    assert proxy.count() == 1
    assert record.delivered and record.forwarded and record.status == 200
    # langchain-openai 1.x sends max_completion_tokens; llama.cpp honours it.
    body = record.body
    assert MAX_TOKENS in (body.get("max_tokens"), body.get("max_completion_tokens"))


def test_llamaindex_openai_like_through_the_proxy(proxy: FaultProxy) -> None:
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(api_base=proxy.base_url, api_key="none", model="smollm2",
                     is_chat_model=True, max_tokens=MAX_TOKENS, temperature=0, max_retries=0)
    assert str(llm.complete(PROMPT)).strip()
    assert proxy.count() == 1
    [record] = proxy.chat_requests()
    assert record.delivered and record.status == 200
    assert record.body["messages"][-1]["role"] == "user"


def test_injected_429_reaches_the_client_with_retry_after(proxy: FaultProxy) -> None:
    proxy.fail_next(2, 429, retry_after=0.1)
    client = sdk(proxy, max_retries=0)
    for _ in range(2):
        with pytest.raises(openai.RateLimitError) as caught:
            ask(client)
        assert caught.value.response.headers["retry-after"] == "0.1"
    assert ask(client).strip()
    records = proxy.chat_requests()
    assert [(r.status, r.fault, r.forwarded, r.delivered) for r in records] == [
        (429, "status", False, False), (429, "status", False, False), (200, None, True, True)]


def test_sdk_retries_through_injected_503s(proxy: FaultProxy) -> None:
    proxy.fail_next(2, 503, retry_after=0.05)
    assert ask(sdk(proxy, max_retries=2)).strip()
    assert [r.status for r in proxy.chat_requests()] == [503, 503, 200]
    assert proxy.pending_faults() == 0


def test_dropped_connection_and_delay(proxy: FaultProxy) -> None:
    client = sdk(proxy, max_retries=0)
    proxy.drop_next(1)
    with pytest.raises(openai.APIConnectionError):
        ask(client)
    proxy.delay_next(1, 1.0)
    with pytest.raises(openai.APITimeoutError):
        ask(client.with_options(timeout=0.3))
    dropped, delayed = proxy.chat_requests()
    assert (dropped.fault, dropped.status, dropped.delivered) == ("drop", None, False)
    assert delayed.fault == "delay" and not delayed.delivered
    # Other paths pass through uncounted and are never faulted.
    proxy.fail_next(1, 500)
    models = httpx.get(f"{proxy.base_url}/models", timeout=5, trust_env=False)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "smollm2"
    assert proxy.count() == 2 and proxy.pending_faults() == 1


def test_kill_gives_502_then_restart_on_the_same_port(server: ModelServer,
                                                      proxy: FaultProxy) -> None:
    client = sdk(proxy, max_retries=0)
    port, pid = server.port, server.pid
    server.kill()
    assert not server.running
    with pytest.raises(openai.InternalServerError) as caught:
        ask(client)
    assert caught.value.status_code == 502
    [down] = proxy.chat_requests()
    assert (down.status, down.forwarded, down.delivered) == (502, True, False)
    server.restart()
    assert server.port == port and server.pid != pid and server.running
    assert ask(client).strip()
    assert proxy.chat_requests()[-1].delivered


def test_require_model_fails_instead_of_skipping_when_required(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_server, "gguf_path", lambda: None)
    monkeypatch.setenv(llm_server.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="RCP_AGENTIC_REQUIRE_LLM"):
        require_model()
    monkeypatch.delenv(llm_server.REQUIRE_ENV)
    with pytest.raises(pytest.skip.Exception):
        require_model()
