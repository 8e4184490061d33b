"""The LLM door against a hostile endpoint (tests/hostile_llm.py): no credential in any
error, log or traceback; every call under the request's deadline and cancellation, with
its slot freed when the caller gives up; replies read up to a cap; query-time spend
limited per caller and in total (:mod:`rcp_agentic.models.llm_spend`)."""

from __future__ import annotations

import base64
import logging
import threading
import time
import traceback

import pytest
from hostile_llm import HostileEndpoint, wait_for

from rcp_agentic.control import RequestControl, Spender
from rcp_agentic.errors import BackendUnavailable, Cancelled, RateLimited, RCPError, Timeout
from rcp_agentic.models.endpoint import OpenAIEndpoint
from rcp_agentic.models.llm import ChatLLM
from rcp_agentic.models.llm_retry import CallPolicy
from rcp_agentic.models.llm_spend import SpendGovernor, SpendLimits
from rcp_agentic.models.redact import MASK, redact, secret_forms

KEY = "sk-CANARY-7f3a9c1e5b2d4f60"


def leaks(text: str) -> list[str]:
    """The forms of KEY found in ``text``."""
    forms = [KEY, base64.b64encode(KEY.encode()).decode(), f"Bearer {KEY}"]
    return [f for f in forms if f in text]


def everything_about(exc: BaseException) -> str:
    """All an operator or a client could see of ``exc``: message, data, repr, traceback."""
    parts = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    if isinstance(exc, RCPError):
        parts.append(repr(exc.to_wire()))
    return "\n".join(parts)


def door(endpoint: HostileEndpoint, **policy: float) -> ChatLLM:
    limits = {"timeout_seconds": 30.0, "retries": 2, "backoff_seconds": 0.01,
              "concurrency": 2, **policy}
    return ChatLLM(OpenAIEndpoint(endpoint.base_url, "m", api_key=KEY, max_reply_bytes=1 << 20),
                   policy=CallPolicy(**limits))  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["echo401", "echo500"])
def test_an_upstream_error_that_echoes_the_key_never_shows_it(
        mode: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with HostileEndpoint(mode) as upstream:
        chat = door(upstream)
        with pytest.raises(BackendUnavailable) as info:
            chat.ask("system", "user", control=RequestControl(timeout=20))
        seen = everything_about(info.value)
    assert not leaks(seen), seen
    assert not leaks(caplog.text)
    status = 401 if mode == "echo401" else 500
    assert info.value.data["status"] == status and f"HTTP {status}" in info.value.message
    assert info.value.data["retryable"] is (status == 500)


def test_a_framework_clients_error_text_is_summarised_not_passed_on() -> None:
    """LangChain's OpenAI client puts the server's body (here: the echoed key) in its
    exception's message; the door keeps the status and the reason only."""
    from langchain_openai import ChatOpenAI

    with HostileEndpoint("echo401") as upstream:
        model = ChatOpenAI(base_url=upstream.base_url, api_key=KEY, model="m",  # type: ignore[arg-type]
                           max_retries=0, timeout=10)
        chat = ChatLLM(model, policy=CallPolicy(retries=0))
        with pytest.raises(BackendUnavailable) as info:
            chat.ask("system", "user")
    seen = everything_about(info.value)
    assert not leaks(seen), seen
    assert info.value.__context__ is None and info.value.__cause__ is None


def test_redact_masks_held_secrets_and_credential_shapes() -> None:
    userinfo = "alice:hunter2-pass"
    text = (f'{{"Authorization": "Bearer {KEY}", "x-api-key": "abc123456"}} '
            f"Basic {base64.b64encode(userinfo.encode()).decode()} "
            f"http://{userinfo}@127.0.0.1/v1 api_key=zzz999999&x=1")
    out = redact(text, secret_forms([KEY, userinfo]))
    for secret in (KEY, "abc123456", "hunter2-pass", "zzz999999",
                   base64.b64encode(userinfo.encode()).decode()):
        assert secret not in out, out
    assert MASK in out and "127.0.0.1/v1" in out


def test_a_url_with_credentials_is_refused_without_echoing_them() -> None:
    with pytest.raises(ValueError) as info:
        OpenAIEndpoint("http://user:hunter2-pass@127.0.0.1:9/v1", "m")
    assert "hunter2-pass" not in str(info.value)


def test_a_hung_endpoint_is_given_up_at_the_deadline_and_frees_its_slot() -> None:
    with HostileEndpoint("hang") as upstream:
        chat = door(upstream, retries=4)
        started = time.monotonic()
        with pytest.raises(Timeout):  # -32014: the request's deadline, not the model's
            chat.ask("system", "user", control=RequestControl(timeout=1.5))
        took = time.monotonic() - started
        assert took < 2.5, took  # the deadline, not 5 attempts x 30 s
        assert chat._slots._value == 2  # both slots free again at once


def test_a_dripping_endpoint_cannot_hold_slots_past_the_deadline() -> None:
    with HostileEndpoint("drip", drip_seconds=0.3) as upstream:
        chat = door(upstream, concurrency=4)
        outcomes: list[BaseException] = []

        def one() -> None:
            try:
                chat.ask("system", "user", control=RequestControl(timeout=1.0))
            except BaseException as exc:  # noqa: BLE001 - collected for the asserts
                outcomes.append(exc)

        before = {t for t in threading.enumerate() if t.name == "rcp-llm-call"}
        threads = [threading.Thread(target=one) for _ in range(4)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert time.monotonic() - started < 4.0  # 1 s deadline, not the 30 s timeout
        assert len(outcomes) == 4 and all(isinstance(e, Timeout) for e in outcomes)
        assert chat._slots._value == 4
        # The abandoned reads stop by themselves at the same deadline (a drip is not
        # a read that restarts the clock).
        assert wait_for(lambda: not {t for t in threading.enumerate()
                                     if t.name == "rcp-llm-call"} - before, 5.0)


def test_a_cancelled_request_stops_waiting_for_its_call() -> None:
    with HostileEndpoint("hang") as upstream:
        chat = door(upstream)
        control = RequestControl(timeout=60)
        threading.Timer(0.3, control.cancel, args=("client left",)).start()
        started = time.monotonic()
        with pytest.raises(Cancelled):
            chat.ask("system", "user", control=control)
        assert time.monotonic() - started < 1.5
        assert chat._slots._value == 2


def test_a_request_that_finds_no_slot_before_its_deadline_is_refused() -> None:
    with HostileEndpoint("hang") as upstream:
        chat = door(upstream, concurrency=1)
        holder = threading.Thread(target=lambda: pytest.raises(
            Timeout, chat.ask, "s", "u", control=RequestControl(timeout=3)))
        holder.start()
        assert wait_for(lambda: chat._slots._value == 0, 2)
        with pytest.raises(RateLimited) as info:
            chat.ask("s", "u", control=RequestControl(timeout=0.3))
        assert info.value.data["retryAfterMs"] > 0
        holder.join(5)


def test_a_200_mb_reply_is_refused_at_the_cap() -> None:
    with HostileEndpoint("huge") as upstream:
        chat = door(upstream, retries=0)
        with pytest.raises(BackendUnavailable, match="cap"):
            chat.ask("system", "user", control=RequestControl(timeout=30))
        # The server got to write the cap and what the sockets buffer, not 200 MB.
        assert upstream.bytes_written < 48 * 2**20


def test_the_reply_cache_tells_two_servers_of_one_model_apart() -> None:
    a = ChatLLM(OpenAIEndpoint("http://127.0.0.1:9/v1", "same-model"))
    b = ChatLLM(OpenAIEndpoint("http://127.0.0.1:10/v1", "same-model"))
    assert a.identity == b.identity and a.cache_identity != b.cache_identity


def test_query_calls_are_charged_to_the_caller_and_counted_on_the_request() -> None:
    with HostileEndpoint("ok") as upstream:
        chat = ChatLLM(OpenAIEndpoint(upstream.base_url, "m", api_key=KEY),
                       spend=SpendGovernor(anonymous=SpendLimits(calls_per_minute=3)))
        anonymous = Spender("anonymous\0127.0.0.1", anonymous=True)
        control = RequestControl(timeout=10, spender=anonymous)
        assert chat.ask_many("s", ["a", "b", "c"], control=control) == [
            "Paris is the capital of France."] * 3
        assert control.llm_spent.wire() == {"calls": 3, "cached": 0, "promptTokens": 60,
                                            "completionTokens": 24}
        with pytest.raises(RateLimited) as info:
            chat.ask("s", "d", control=RequestControl(timeout=10, spender=anonymous))
        assert info.value.data["retryable"] and info.value.data["retryAfterMs"] > 1000
        assert upstream.requests == 3
        # Another caller, and a trusted one (no spender), are not held back.
        chat.ask("s", "e", control=RequestControl(spender=Spender("anonymous\0::1", True)))
        chat.ask("s", "f", control=RequestControl())
        assert upstream.requests == 5


def test_retries_spend_the_allowance_too() -> None:
    with HostileEndpoint("echo500") as upstream:
        chat = ChatLLM(OpenAIEndpoint(upstream.base_url, "m"),
                       policy=CallPolicy(retries=10, backoff_seconds=0.001),
                       spend=SpendGovernor(caller=SpendLimits(calls_per_minute=4)))
        with pytest.raises(BackendUnavailable) as info:  # the model's failure, not the budget's
            chat.ask("s", "u", control=RequestControl(timeout=20, spender=Spender("bearer")))
        assert info.value.data["status"] == 500
        assert upstream.requests == 4
        with pytest.raises(RateLimited):  # the next request finds the allowance spent
            chat.ask("s", "u", control=RequestControl(timeout=20, spender=Spender("bearer")))
        assert upstream.requests == 4


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_allowance_refills_over_the_minute_and_caps_the_total() -> None:
    clock = Clock()
    governor = SpendGovernor(total=SpendLimits(calls_per_minute=4),
                             anonymous=SpendLimits(calls_per_minute=2, tokens_per_minute=1000),
                             clock=clock)
    one, two = Spender("a", anonymous=True), Spender("b", anonymous=True)
    governor.reserve(one, 100)
    governor.reserve(one, 100)
    with pytest.raises(RateLimited) as info:
        governor.reserve(one, 100)
    assert info.value.data["retryAfterMs"] == 30_000  # half a minute refills one call of 2
    governor.reserve(two, 100)
    governor.reserve(two, 100)
    with pytest.raises(RateLimited, match="server's"):  # the total is spent too
        governor.reserve(Spender("c", anonymous=True), 1)
    clock.now += 30
    governor.reserve(one, 100)
    with pytest.raises(RateLimited) as big:
        governor.reserve(Spender("d", anonymous=True), 5000)  # more than a minute's tokens
    assert big.value.data["retryable"] is False
    assert governor.reserve(None, 10**9) is None  # trusted: no limit
