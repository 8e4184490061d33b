"""Reading an HTTP request body under a size limit, for every HTTP route."""

from __future__ import annotations

from starlette.requests import Request

DEFAULT_BODY_LIMIT = 8 * 1024 * 1024


async def read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None when it exceeds ``limit`` bytes (refused from the declared length
    before anything is read, else as soon as the stream passes it)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            return None
    return bytes(body)
