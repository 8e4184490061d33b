"""Reading a JSON request body for every HTTP route: media type, size limit and deadline.

A body is refused with :class:`BodyRefused`, carrying the HTTP status and the RCP error
to answer with: 415 when it is not declared ``application/json`` (a browser can send
``text/plain`` or a form cross-site without a preflight, never JSON), 413 over the size
limit, 408 when it does not arrive in time (a slow client must not hold a connection).

A request refused before its body is read (Host, Origin, token, media type) still has
its id echoed when the body gives it cheaply: :func:`peek_id` reads at most
:data:`PEEK_BYTES` within :data:`PEEK_TIMEOUT` seconds, never the full limit.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import ClientDisconnect, Request

from .. import jsonio
from ..errors import InvalidRequest, ParseError, PayloadTooLarge, RCPError, Timeout
from .dispatcher import request_id
from .listener import ServerLimits

DEFAULT_BODY_LIMIT = 8 * 1024 * 1024
DEFAULT_BODY_TIMEOUT = ServerLimits.body_timeout
# What a refusal decided before the body is read may read of it to echo the id.
PEEK_BYTES = 64 * 1024
PEEK_TIMEOUT = 1.0


class BodyRefused(Exception):
    """A body refused before it is parsed: the HTTP ``status`` and the RCP ``error``."""

    def __init__(self, status: int, error: RCPError) -> None:
        super().__init__(error.message)
        self.status = status
        self.error = error


def _declared_over(request: Request, limit: int) -> bool:
    declared = request.headers.get("content-length", "")
    return declared.isdigit() and int(declared) > limit


def is_json(content_type: str | None) -> bool:
    """True for ``application/json``, with or without parameters such as ``charset``."""
    media = (content_type or "").partition(";")[0].strip().lower()
    return media == "application/json"


async def read_body(request: Request, limit: int = DEFAULT_BODY_LIMIT,
                    timeout: float = DEFAULT_BODY_TIMEOUT) -> bytes:
    """The JSON body, read within ``timeout`` seconds and ``limit`` bytes, or BodyRefused.

    An oversized body is refused from its declared length before anything is read,
    else as soon as the stream passes the limit.
    """
    if not is_json(request.headers.get("content-type")):
        raise BodyRefused(415, InvalidRequest("Content-Type must be application/json",
                                              field="Content-Type"))
    if _declared_over(request, limit):
        raise BodyRefused(413, PayloadTooLarge(f"request body exceeds {limit} bytes"))
    try:
        async with asyncio.timeout(timeout):
            body = await _at_most(request, limit)
        if body is None:
            raise BodyRefused(413, PayloadTooLarge(f"request body exceeds {limit} bytes"))
    except TimeoutError:
        raise BodyRefused(408, Timeout(f"the request body did not arrive within {timeout:g} s")
                          ) from None
    except ClientDisconnect:
        raise BodyRefused(400, InvalidRequest("the client went away while sending the body")
                          ) from None
    return body


async def _at_most(request: Request, limit: int) -> bytes | None:
    """The body as it streams in, or None as soon as it passes ``limit`` bytes."""
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            return None
    return bytes(body)


async def peek_id(request: Request, limit: int = PEEK_BYTES,
                  timeout: float = PEEK_TIMEOUT) -> Any:
    """The id of the JSON-RPC request in a body that is being refused, or None.

    Reads at most ``limit`` bytes within ``timeout`` seconds (nothing when the declared
    length is larger); a body that is longer, slower, not JSON or not a single request
    with a valid id gives None. The caller closes the connection, as the rest of the
    body may be unread.
    """
    if _declared_over(request, limit):
        return None
    try:
        async with asyncio.timeout(timeout):
            body = await _at_most(request, limit)
        return None if body is None else request_id(jsonio.loads(body))
    except (TimeoutError, ClientDisconnect, ParseError, RuntimeError):
        return None  # RuntimeError: the stream was already consumed
