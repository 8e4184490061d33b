"""The engine's one door to an LLM: :class:`ChatLLM`.

Every LLM call of the engine goes through it (a build's summaries, extraction and reports,
``global`` and ``drift``, rewrites, ``query/transform``, the LLM judge). It takes a
LangChain chat model / Runnable, a LlamaIndex LLM, or an OpenAI-compatible endpoint
(:mod:`.endpoint`), sends a system instruction and a user turn, and returns the reply text.
Around each call it answers from the engine's LLM cache when the same prompt was asked of
the same model (:mod:`rcp_agentic.store.llm_cache`), bounds it (:mod:`.llm_retry`: timeout,
calls in flight, retries with backoff honouring ``Retry-After``), meters it
(:mod:`.llm_usage`: per stage, against a build's token budget) and screens the reply
(:mod:`.llm_guard`: an empty, looping or injection-flagged reply comes back as ``""`` so the
caller uses its offline output). A call that cannot be answered raises
:class:`~rcp_agentic.errors.BackendUnavailable` (retryable); a spent budget raises
:class:`~rcp_agentic.errors.BudgetExhausted`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from ..control import RequestControl
from ..errors import BackendUnavailable, RateLimited, RCPError, Timeout
from .llm_guard import reply_problem
from .llm_reply import (LC_RUNNABLE, LI_LLM, Reply, json_object, message_text, mro_names,
                        reply_usage)
from .llm_retry import CallPolicy, backoff, describe, retry_after, status_of, transient
from .llm_spend import SpendGovernor
from .llm_usage import BUILD_STAGES, LLMUsage, TokenBudget
from .redact import redact, secret_forms

# Statuses with which a server refuses one input rather than the caller (context length,
# payload size, unprocessable content); auth (401/403) and unknown model (404) stop a build.
REJECTED_INPUT = frozenset({400, 413, 422})
# How often a waiting call looks at its request's cancellation.
CANCEL_POLL_SECONDS = 0.25
NO_SLOT_RETRY_MS = 1000

# json_object is imported from here by graph/communities/drift.py and ops.py.
__all__ = ["ChatLLM", "NoSlot", "as_chat", "json_object"]


class ChatLLM:
    """The door every LLM call goes through (see the module doc).

    ``llm``: a LangChain chat model / Runnable, a LlamaIndex LLM, or an object with
    ``chat_reply(system, user) -> Reply`` (:class:`~.endpoint.OpenAIEndpoint`). ``cache``
    keeps build replies (None: none kept); ``screen`` flags a reply carrying an injection;
    ``count_tokens`` counts tokens a server does not report.
    """

    def __init__(self, llm: Any, *, concurrency: int | None = None,
                 policy: CallPolicy | None = None, cache: Any = None,
                 screen: Callable[[str], bool] | None = None,
                 count_tokens: Callable[[str], int] | None = None,
                 spend: SpendGovernor | None = None) -> None:
        if isinstance(llm, ChatLLM):
            raise TypeError("already a ChatLLM")
        mro = mro_names(llm)
        if callable(getattr(llm, "chat_reply", None)):
            self.kind = "endpoint"
        elif LI_LLM in mro or (LC_RUNNABLE not in mro and (hasattr(llm, "complete")
                                                          or hasattr(llm, "chat"))):
            self.kind = "llamaindex"
        elif LC_RUNNABLE in mro or callable(getattr(llm, "invoke", None)):
            self.kind = "langchain"
        else:
            raise TypeError(f"cannot use {type(llm).__name__} as an LLM: pass a LangChain chat "
                            "model / Runnable, a LlamaIndex LLM or an OpenAIEndpoint")
        policy = policy or CallPolicy()
        if concurrency is not None:
            policy = CallPolicy(**{**policy.__dict__, "concurrency": concurrency})
        self.llm = llm
        self.policy = policy
        self.concurrency = policy.concurrency
        self.cache = cache
        self.screen = screen
        if count_tokens is None:
            from .tokenizer import count_tokens as count_cl100k
            count_tokens = count_cl100k
        self.count_tokens: Callable[[str], int] = count_tokens
        self.usage = LLMUsage()
        self.secrets = secret_forms(_held_secrets(llm))
        self.identity = self._identity()
        self.cache_identity = self.identity + self._address() + self._settings()
        self.spend = spend or SpendGovernor()
        self._slots = threading.BoundedSemaphore(policy.concurrency)
        self._budget: TokenBudget | None = None
        # Told (stage, calls answered, calls to make) as a build's calls come back.
        self.progress: Callable[[str, int, int], None] | None = None

    # --- identity ---------------------------------------------------------------------

    def _identity(self) -> str:
        cls = type(self.llm)
        name = None
        if self.kind == "endpoint":
            name = getattr(self.llm, "model", None)
        elif self.kind == "llamaindex":
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

    def _address(self) -> str:
        """Where the model is served (part of the cache key: two servers of one model name
        answer differently), without any credential a URL may hold."""
        for attr in ("base_url", "openai_api_base", "api_base"):
            value = getattr(self.llm, attr, None)
            if isinstance(value, str) and value:
                return "@" + redact(value, self.secrets)
        return ""

    def _settings(self) -> str:
        """Generation settings that change replies (part of the cache key, not the identity)."""
        parts = []
        for attr in ("temperature", "max_tokens", "seed", "top_p"):
            value = getattr(self.llm, attr, None)
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                parts.append(f"{attr}={value}")
        return (";" + ",".join(parts)) if parts else ""

    # --- asking -----------------------------------------------------------------------

    def ask(self, system: str, user: str, *, stage: str = "query",
            control: RequestControl | None = None) -> str:
        """The reply text to one user turn (``""`` when the reply was unfit; see the module
        doc)."""
        return self.ask_many(system, [user], stage=stage, control=control)[0]

    def ask_many(self, system: str, users: Sequence[str], *, stage: str = "query",
                 control: RequestControl | None = None) -> list[str]:
        """Reply texts to several independent user turns, in order. Calls of a build stage
        (``tree``, ``graph``, ``communities``) are read from and kept in the cache and charged
        to the build's budget; calls of a query run under ``control`` (its deadline, its
        cancellation, its caller's allowance) and are charged to it. The first call that
        fails for good stops new calls; the calls in flight finish (and are cached), then it
        is raised."""
        if not users:
            return []
        from ..store.llm_cache import CachedReply, cache_key

        building = stage in BUILD_STAGES
        cache = self.cache if building else None
        keys = [cache_key(self.cache_identity, stage, system, u) for u in users]
        hits = cache.get_many(keys) if cache is not None else {}
        texts: list[str | None] = [None] * len(users)
        todo = []
        for i, key in enumerate(keys):
            hit = hits.get(key)
            if hit is not None:
                texts[i] = hit.reply
            else:
                todo.append(i)
        if hits:
            self.usage.add(stage, cached=len(users) - len(todo))
            if control is not None:
                control.charge_llm(cached=len(users) - len(todo))
        budget = self._budget if building else None
        stop = threading.Event()
        errors: list[BaseException] = []
        rejected: set[int] = set()
        left = [len(todo)]
        lock = threading.Lock()

        def one(i: int) -> None:
            if stop.is_set():
                return
            try:
                if budget is not None:
                    budget.check(stage, left[0])
                reply = self._call_with_retries(system, users[i], stage, control)
            except BaseException as exc:  # noqa: BLE001 - re-raised once the batch settles
                if isinstance(exc, BackendUnavailable) and exc.data.get("status") in \
                        REJECTED_INPUT:
                    # The server refused this input (too long for its context, say): this
                    # unit gets its offline output; the others go on. Not cached, so a
                    # larger context later is asked again.
                    with lock:
                        left[0] -= 1
                    self.usage.add(stage, fallback="rejected")
                    rejected.add(i)
                    return
                stop.set()
                with lock:
                    errors.append(exc)
                return
            with lock:
                left[0] -= 1
                done = len(todo) - left[0]
            if self.progress is not None and building:
                self.progress(stage, done, len(todo))
            if budget is not None:
                budget.charge(reply.prompt_tokens + reply.completion_tokens)
            if cache is not None:
                cache.put(keys[i], stage=stage, model=self.cache_identity,
                          reply=CachedReply(reply.text, reply.prompt_tokens,
                                            reply.completion_tokens))
            texts[i] = reply.text

        if len(todo) == 1 or self.policy.concurrency == 1:
            for i in todo:
                one(i)
        elif todo:
            with ThreadPoolExecutor(max_workers=min(self.policy.concurrency, len(todo)),
                                    thread_name_prefix="rcp-llm") as pool:
                list(pool.map(one, todo))
        if errors:
            raise errors[0]
        return ["" if i in rejected else self._checked(stage, t or "")
                for i, t in enumerate(texts)]

    def _checked(self, stage: str, text: str) -> str:
        problem = reply_problem(text, self.screen)
        if problem is not None:
            self.usage.add(stage, fallback=problem)
            return ""
        return text

    def fallback(self, stage: str, reason: str) -> None:
        """Count a reply the caller could not use (``unparsed``, ...)."""
        self.usage.add(stage, fallback=reason)

    @contextmanager
    def budget(self, limit: int | None) -> Iterator[TokenBudget]:
        """Charge the build stages' calls in this block to a budget of ``limit`` tokens."""
        previous, self._budget = self._budget, TokenBudget(limit)
        try:
            yield self._budget
        finally:
            self._budget = previous

    # --- one call ---------------------------------------------------------------------

    def _estimate(self, system: str, user: str) -> int:
        """Tokens one call may cost: the prompt's and the completion cap."""
        cap = getattr(self.llm, "max_tokens", None)
        cap = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else 512
        return self.count_tokens(system) + self.count_tokens(user) + cap

    def _failure(self, exc: BaseException, attempts: int, stage: str) -> BackendUnavailable:
        """The engine's error for a call given up: a status and a short reason, scrubbed of
        every credential; the upstream exception is not chained (its text may hold one)."""
        status = status_of(exc)
        data: dict[str, Any] = {"model": redact(self.identity, self.secrets), "stage": stage,
                                "retryable": transient(exc)}
        if status is not None:
            data["status"] = status
        hint = retry_after(exc)
        if hint is not None:
            data["retryAfterMs"] = max(1, int(hint * 1000))
        return BackendUnavailable(
            redact(f"LLM {self.identity} failed after {attempts} attempt(s): "
                   f"{describe(exc)}", self.secrets), **data)

    def _call_with_retries(self, system: str, user: str, stage: str,
                           control: RequestControl | None) -> Reply:
        estimate = self._estimate(system, user) if control is not None else 0
        attempt = 0
        failure: RCPError | None = None
        last: BackendUnavailable | None = None  # the upstream failure a retry would repair
        while failure is None:
            if control is not None:
                control.check()
            try:
                reservation = (self.spend.reserve(control.spender, estimate)
                               if control is not None else None)
            except RateLimited:
                if last is None:
                    raise
                # No allowance left for a retry: the model's failure is the answer.
                failure = last
                continue
            started = time.perf_counter()
            try:
                reply = self._attempt(system, user, control)
            except NoSlot:
                self.spend.settle(reservation, 0)  # nothing was sent
                raise
            except RCPError:  # cancelled, or the deadline passed while waiting
                self.usage.add(stage, calls=1, failures=1,
                               seconds=time.perf_counter() - started)
                if control is not None:
                    control.charge_llm(calls=1)
                raise
            except Exception as exc:
                # What a failed call cost stays charged at its estimate: failing on purpose
                # must not be a way to spend more.
                self.usage.add(stage, calls=1, seconds=time.perf_counter() - started)
                if control is not None:
                    control.charge_llm(calls=1)
                attempt += 1
                wait = backoff(self.policy, attempt, exc)
                out_of_time = control is not None and not _time_for(control, wait)
                if attempt > self.policy.retries or not transient(exc) or out_of_time:
                    self.usage.add(stage, failures=1)
                    # Raised outside this block, so no upstream exception rides along as
                    # its context (its text may hold a credential).
                    failure = (Timeout("the request's deadline leaves no time for the LLM "
                                       "call", retryable=True, stage=stage)
                               if out_of_time and transient(exc)
                               else self._failure(exc, attempt, stage))
                    continue
                self.usage.add(stage, retries=1)
                last = self._failure(exc, attempt, stage)
                _sleep(wait, control)
                continue
            tokens = reply.prompt_tokens + reply.completion_tokens
            self.spend.settle(reservation, tokens or estimate)
            self.usage.add(stage, calls=1, prompt_tokens=reply.prompt_tokens,
                           completion_tokens=reply.completion_tokens,
                           seconds=time.perf_counter() - started)
            if control is not None:
                control.charge_llm(calls=1, prompt_tokens=reply.prompt_tokens,
                                   completion_tokens=reply.completion_tokens)
            return reply
        raise failure

    def _attempt(self, system: str, user: str, control: RequestControl | None) -> Reply:
        """One call in a daemon thread holding a slot. A query's call waits for a slot and
        for its reply no longer than its deadline and stops waiting when it is cancelled;
        the slot is freed when the call returns or when its caller gives up, whichever is
        first (an abandoned endpoint call stops by itself at the same deadline)."""
        if control is None:  # a build's call waits its turn
            self._slots.acquire()
        elif not self._slots.acquire(timeout=_left(self._deadline(control))):
            raise NoSlot("no LLM call slot came free before the request's deadline: the "
                         "model is busy", retryable=True, retryAfterMs=NO_SLOT_RETRY_MS)
        deadline = self._deadline(control)
        slot = _Slot(self._slots)
        future: Future[Reply] = Future()

        def run() -> None:
            try:
                future.set_result(self._call(system, user, deadline, control))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(exc)
            finally:
                slot.free()

        threading.Thread(target=run, name="rcp-llm-call", daemon=True).start()
        try:
            return self._wait(future, deadline, control)
        finally:
            slot.free()

    def _deadline(self, control: RequestControl | None) -> float:
        """The monotonic instant this attempt ends by: the policy's timeout, or sooner the
        request's deadline."""
        end = time.monotonic() + self.policy.timeout_seconds
        if control is not None and control.deadline is not None:
            end = min(end, control.deadline)
        return end

    @staticmethod
    def _wait(future: Future[Reply], deadline: float,
              control: RequestControl | None) -> Reply:
        allowed = max(0.0, deadline - time.monotonic())
        while True:
            left = deadline - time.monotonic()
            try:
                return future.result(timeout=max(0.0, min(left, CANCEL_POLL_SECONDS)))
            except TimeoutError:
                if future.done():  # the call itself raised it
                    raise
            if control is not None:
                control.check()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no reply within {allowed:.3g} s") from None

    def _call(self, system: str, user: str, deadline: float,
              control: RequestControl | None) -> Reply:
        if self.kind == "endpoint":
            cancelled = (lambda: control.cancelled) if control is not None else None
            reply: Reply = self.llm.chat_reply(system, user, deadline=deadline,
                                               cancelled=cancelled)
            return reply
        raw = self._langchain(system, user) if self.kind == "langchain" else self._llamaindex(
            system, user)
        text = message_text(raw)
        p, c = reply_usage(raw)
        return Reply(text, p if p is not None else self.count_tokens(system + "\n" + user),
                     c if c is not None else self.count_tokens(text))

    def _langchain(self, system: str, user: str) -> Any:
        from langchain_core.messages import HumanMessage, SystemMessage

        return self.llm.invoke([SystemMessage(content=system), HumanMessage(content=user)])

    def _llamaindex(self, system: str, user: str) -> Any:
        metadata = getattr(self.llm, "metadata", None)
        if bool(getattr(metadata, "is_chat_model", False)) or not hasattr(self.llm, "complete"):
            from llama_index.core.llms import ChatMessage, MessageRole

            return self.llm.chat([ChatMessage(role=MessageRole.SYSTEM, content=system),
                                  ChatMessage(role=MessageRole.USER, content=user)])
        return self.llm.complete(f"{system}\n\n{user}")


class NoSlot(RateLimited):
    """No call slot came free before the request's deadline (nothing was sent)."""


class _Slot:
    """One held slot of the door's semaphore, freed exactly once by whichever comes first:
    the call returning or its caller giving up."""

    def __init__(self, slots: threading.BoundedSemaphore) -> None:
        self._slots = slots
        self._lock = threading.Lock()
        self._held = True

    def free(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        self._slots.release()


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _time_for(control: RequestControl, wait: float) -> bool:
    """Whether a retry after ``wait`` seconds still has time before the deadline."""
    left = control.remaining()
    return left is None or left > wait


def _sleep(seconds: float, control: RequestControl | None) -> None:
    """Sleep, waking early (and raising) when the request is cancelled."""
    end = time.monotonic() + seconds
    while True:
        if control is not None:
            control.check()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, CANCEL_POLL_SECONDS))


def _held_secrets(llm: Any) -> list[str]:
    """The credentials an LLM object holds (an endpoint's key; a framework model's
    ``api_key`` / ``openai_api_key``, plain or pydantic ``SecretStr``), to mask them."""
    found: list[str] = list(getattr(llm, "secrets", ()) or ())
    for attr in ("api_key", "openai_api_key"):
        try:
            value = getattr(llm, attr, None)
        except Exception:  # noqa: BLE001 - a framework property; no secret then
            continue
        reveal = getattr(value, "get_secret_value", None)
        if callable(reveal):
            value = reveal()
        if isinstance(value, str):
            found.append(value)
    return found


def as_chat(llm: Any) -> ChatLLM:
    """``llm`` as the door (itself when it already is one)."""
    return llm if isinstance(llm, ChatLLM) else ChatLLM(llm)
