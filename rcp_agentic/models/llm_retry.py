"""How one LLM call is bounded and retried: a per-call timeout, a cap on calls in flight,
and retries of transient failures with exponential backoff and full jitter that honour the
server's ``Retry-After``.

A failure is transient when it carries an HTTP status of 408, 409, 425, 429 or 5xx, or is
a timeout or connection error (httpx's, openai's, Python's): the classes of the clients
LangChain, LlamaIndex and the ``openai`` SDK raise, recognised by attribute and class name
so none of them is imported here. Anything else (400, 401, 404, a bug) fails at once.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass
from http import HTTPStatus

from .redact import redact

DESCRIBE_CHARS = 160
TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_TRANSIENT_NAMES = ("Timeout", "Connect", "Connection", "RemoteProtocol", "ReadError",
                    "ServiceUnavailable", "RateLimit", "InternalServer")


@dataclass(frozen=True)
class CallPolicy:
    """Limits of the calls to one LLM: ``timeout_seconds`` per attempt, ``retries`` after
    the first attempt, backoff from ``backoff_seconds`` doubling up to
    ``backoff_max_seconds`` (a longer ``Retry-After`` is honoured up to
    ``retry_after_max_seconds``), and at most ``concurrency`` calls in flight."""

    timeout_seconds: float = 120.0
    retries: int = 4
    backoff_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    retry_after_max_seconds: float = 120.0
    concurrency: int = 4

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.retries < 0 or self.timeout_seconds <= 0:
            raise ValueError("retries must be >= 0 and timeout_seconds > 0")


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from (frameworks wrap the client's)."""
    out: list[BaseException] = []
    while exc is not None and exc not in out and len(out) < 8:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return out


def status_of(exc: BaseException) -> int | None:
    """The HTTP status a client error carries (on itself or its response), if any."""
    for e in _chain(exc):
        for obj in (e, getattr(e, "response", None)):
            code = getattr(obj, "status_code", None)
            if isinstance(code, int):
                return code
    return None


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (``Retry-After``: seconds or an HTTP date;
    ``retry-after-ms``), if it did."""
    for e in _chain(exc):
        hint = getattr(e, "retry_after", None)  # our endpoint's error carries it parsed
        if isinstance(hint, (int, float)) and not isinstance(hint, bool):
            return max(0.0, float(hint))
        headers = getattr(getattr(e, "response", None), "headers", None)
        if headers is None:
            continue
        try:
            ms = headers.get("retry-after-ms")
            if ms is not None:
                return max(0.0, float(ms) / 1000)
            value = headers.get("retry-after")
        except Exception:  # noqa: BLE001 - a foreign headers object; no hint then
            return None
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None  # neither seconds nor a date: no hint
        if when.tzinfo is None:
            return None
        return max(0.0, when.timestamp() - time.time())
    return None


def transient(exc: BaseException) -> bool:
    """Whether retrying the call may succeed (rate limit, overload, timeout, connection)."""
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS or status >= 500
    for e in _chain(exc):
        if isinstance(e, (TimeoutError, ConnectionError)):
            return True
        names = {c.__name__ for c in type(e).__mro__}
        if any(part in name for name in names for part in _TRANSIENT_NAMES):
            return True
    return False


def backoff(policy: CallPolicy, attempt: int, exc: BaseException,
            rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based) after ``exc``: the
    server's ``Retry-After`` when it gave one, else full jitter over an exponential cap."""
    hint = retry_after(exc)
    if hint is not None:
        return min(hint, policy.retry_after_max_seconds)
    cap = min(policy.backoff_max_seconds, policy.backoff_seconds * (2 ** (attempt - 1)))
    return (rng or random).uniform(cap / 2, cap)


def describe(exc: BaseException) -> str:
    """A short description of a failed call: the HTTP status and its standard reason when
    there is one (never the server's body: gateways echo request headers, keys among them,
    into error pages), else the exception's class and the first words of its message. The
    caller still masks the credentials it holds (:func:`.redact.redact`)."""
    status = status_of(exc)
    name = type(exc).__name__
    if status is not None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "non-standard status"
        return f"{name} (HTTP {status} {reason})"
    text = redact(" ".join(str(exc).split())[:DESCRIBE_CHARS])
    return name + (f": {text}" if text else "")
