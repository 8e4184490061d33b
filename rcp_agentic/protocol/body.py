"""Reading a JSON request body for every HTTP route: media type, size limit and deadline.

A body is refused with :class:`BodyRefused`, carrying the HTTP status and the RCP error
to answer with: 415 when it is not declared ``application/json`` (a browser can send
``text/plain`` or a form cross-site without a preflight, never JSON), 413 over the size
limit, 408 when it does not arrive in time (a slow client must not hold a connection).
"""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect, Request

from ..errors import InvalidRequest, PayloadTooLarge, RCPError, Timeout
from .listener import ServerLimits

DEFAULT_BODY_LIMIT = 8 * 1024 * 1024
DEFAULT_BODY_TIMEOUT = ServerLimits.body_timeout


class BodyRefused(Exception):
    """A body refused before it is parsed: the HTTP ``status`` and the RCP ``error``."""

    def __init__(self, status: int, error: RCPError) -> None:
        super().__init__(error.message)
        self.status = status
        self.error = error


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
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyRefused(413, PayloadTooLarge(f"request body exceeds {limit} bytes"))
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for part in request.stream():
                body += part
                if len(body) > limit:
                    raise BodyRefused(413, PayloadTooLarge(f"request body exceeds {limit} bytes"))
    except TimeoutError:
        raise BodyRefused(408, Timeout(f"the request body did not arrive within {timeout:g} s")
                          ) from None
    except ClientDisconnect:
        raise BodyRefused(400, InvalidRequest("the client went away while sending the body")
                          ) from None
    return bytes(body)
