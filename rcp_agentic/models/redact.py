"""Credentials kept out of every text the engine shows: a message built from an upstream
failure (an LLM endpoint, a framework client) passes through :func:`redact` before it
reaches an error, a log line or the wire.

Two nets: the exact secrets the engine holds (an API key, a URL's password, and their
``Basic`` / base64 forms), and the shapes credentials take in the text of gateways and
proxies that echo a request back (``Authorization: Bearer …``, ``api_key=…``, ``sk-…``,
``user:pass@`` in a URL).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

MASK = "[redacted]"
# Shorter secrets would mask ordinary words; no real key is this short.
MIN_SECRET_CHARS = 6

_SHAPES = (
    # Authorization: Bearer x / "authorization": "Basic x" / Proxy-Authorization ...
    re.compile(r"(?i)((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)[^\"'\r\n,}]+"),
    re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{6,}"),
    # api_key=…, "x-api-key": "…", password: …, secret=…, access_token=…
    re.compile(r"(?i)((?:x-)?api[-_]?key|access[-_]?token|client[-_]?secret|password|secret)"
               r"([\"']?\s*[:=]\s*[\"']?)[^\"'\s&,;}]+"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"),
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s]+@"),
)


def _forms(secret: str) -> set[str]:
    """``secret`` and the forms it travels in (base64, as HTTP Basic encodes it)."""
    forms = {secret}
    raw = secret.encode("utf-8", "surrogatepass")
    forms.add(base64.b64encode(raw).decode("ascii"))
    return {f for f in forms if len(f) >= MIN_SECRET_CHARS}


def secret_forms(secrets: Iterable[str | None]) -> tuple[str, ...]:
    """Every form of every secret worth masking, longest first (a key inside a longer
    form is masked with it)."""
    out: set[str] = set()
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_CHARS:
            out |= _forms(secret)
    return tuple(sorted(out, key=lambda s: (-len(s), s)))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret and every credential-shaped span masked."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    text = _SHAPES[0].sub(lambda m: m.group(1) + MASK, text)
    text = _SHAPES[1].sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _SHAPES[2].sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _SHAPES[3].sub(MASK, text)
    return _SHAPES[4].sub(lambda m: m.group(1) + MASK + "@", text)
