"""Who sends a request, as its transport knows it: what that caller is offered (§13.2,
§15.6) and the session ids bound to it.

A caller that may not write (anonymous over HTTP without allowed anonymous writes) is
offered neither ``index`` nor ``feedback``, and ``memory`` for its own session only; the
trusted callers (in process, the process that spawned a stdio server) may write. Session
ids are capabilities, so a session id a caller sends is replaced by a key derived from the
caller's principal and the id (:func:`session_key`): no caller can name another's session.
The rules in full: docs/internals.md, "The HTTP server".
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..control import Spender
from ..errors import CapabilityMissing, InvalidParams, OptionUnsupported
from ..options import VENDOR
from ..text import is_unicode

# Sessions live in this process's memory, so a key of this process binds them.
_SECRET = secrets.token_bytes(32)
KEY_CHARS = 32  # hex characters of a session key (128 bits), or the engine's limit if lower
SESSION_MEMORY = "session:"
# The params naming a session, per method (retrieve also takes its Python name).
SESSION_PARAMS: dict[str, tuple[str, ...]] = {
    "retrieve": ("sessionId", "session_id"), "graph": ("sessionId",),
    "memory/build": ("sessionId",), "memory/recall": ("sessionId",)}
MEMORY_ID_METHODS = ("memory/build", "memory/recall")


# The methods of protocol/methods.py that change what the server holds (memory/build only
# outside the caller's own session: see is_write).
WRITE_METHODS = frozenset({"index/add", "index/delete", "feedback", "memory/build"})
WRITE_HINT = ("writes over HTTP need a bearer token: start the server with $RCP_AGENTIC_TOKEN "
              "set and send it, or allow anonymous writes with --allow-anonymous-writes")
# The principal of a caller known only by its transport connection (see Caller.connection_bound).
CONNECTION = "connection\0"
UNBOUND_NOTE = ("the session id is kept for this HTTP connection only: a request on another "
                "connection names a new, empty session (no dedup, memory or frontier carried "
                "over). To keep a session across connections, send the token of "
                "initialize.result._meta.session as the RCP-Session header")


def is_write(method: str, params: Mapping[str, Any]) -> bool:
    """Whether a request changes what the server holds: a method of :data:`WRITE_METHODS`,
    except ``memory/build`` with ``scope: "session"`` (the caller's own session state)."""
    return method in WRITE_METHODS and not (method == "memory/build"
                                            and params.get("scope") == "session")


def refuse_write(method: str, params: Mapping[str, Any]) -> None:
    """Refuse a write to a caller that may not write as its capabilities say (§12, §13.2):
    the method is not offered to it (-32003), or for ``memory/build`` only its ``session``
    scope is (-32005, ``option: "scope"``); both say how to get write access."""
    if not is_write(method, params):
        return
    if method == "memory/build":
        raise OptionUnsupported("memory/build of the corpus's graph is not offered to this "
                                f"caller (scope 'session' is): {WRITE_HINT}", option="scope")
    raise CapabilityMissing(f"{method} is not offered to this caller: {WRITE_HINT}")


@dataclass(frozen=True)
class Caller:
    """One request's caller: ``writes`` is whether it may change what the server holds;
    ``principal`` names it for session binding (None: trusted, ids used as given)."""

    writes: bool = True
    principal: str | None = None
    # Whom its LLM work is charged to (None: trusted, no allowance applies).
    spender: Spender | None = None

    @property
    def connection_bound(self) -> bool:
        """Whether the caller is known only by its connection: its session ids end with it."""
        return self.principal is not None and self.principal.startswith(CONNECTION)


TRUSTED = Caller()


def read_only(caps: dict[str, Any]) -> dict[str, Any]:
    """``caps`` as offered to a caller that may not write: no ``index``, no ``feedback``,
    ``memory`` only with its ``session`` scope (dropped when that scope is not offered), and
    no LLM spend in the derived units' status (:func:`without_spend`)."""
    out = copy.deepcopy(caps)
    out.pop("index", None)
    out.pop("feedback", None)
    vendor = out.get(VENDOR)
    if isinstance(vendor, dict) and isinstance(vendor.get("units"), dict):
        vendor["units"] = without_spend(vendor["units"])
    memory = out.get("memory")
    if isinstance(memory, dict):
        if "session" in (memory.get("scopes") or ()):
            memory["scopes"] = ["session"]
        else:
            del out["memory"]
    return out


def without_spend(units: Mapping[str, Any]) -> dict[str, Any]:
    """The derived units' status (``x-rcp-agentic.units``) without what their builds' LLM
    calls cost (``llm``): the operator's bill, not for a caller that may not write."""
    return {kind: {k: v for k, v in entry.items() if k != "llm"} if isinstance(entry, dict)
            else entry for kind, entry in units.items()}


def session_key(principal: str, session_id: str, chars: int = KEY_CHARS) -> str:
    """The engine's name for ``principal``'s session ``session_id``: an HMAC under this
    process's key, in hex, ``chars`` long. The principal enters as its SHA-256, so no choice
    of principal and id can collide with another pair."""
    message = (hashlib.sha256(principal.encode("utf-8", "surrogatepass")).digest()
               + session_id.encode("utf-8"))
    return hmac.new(_SECRET, message, hashlib.sha256).hexdigest()[:chars]


def _checked(value: Any, field: str, max_chars: int) -> str:
    """A client's session id, within the engine's limits, or InvalidParams on ``field``."""
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"{field} must name a session with a non-empty string", field=field)
    if len(value) > max_chars:
        raise InvalidParams(f"{field} names a session of {len(value)} characters, more than "
                            f"the limit of {max_chars}", field=field)
    if not is_unicode(value):
        raise InvalidParams(f"{field} holds a lone UTF-16 surrogate (not valid Unicode)",
                            field=field)
    return value


def bind_sessions(method: str, params: Mapping[str, Any], principal: str,
                  max_chars: int) -> tuple[dict[str, Any], dict[str, str]]:
    """``params`` with every session id replaced by ``principal``'s key for it, and the keys
    back to the client's ids. A malformed id is InvalidParams (the engine's limits)."""
    out = dict(params)
    back: dict[str, str] = {}
    chars = min(KEY_CHARS, max_chars)

    def bound(client_id: str) -> str:
        key = session_key(principal, client_id, chars)
        back[key] = client_id
        return key

    for name in SESSION_PARAMS.get(method, ()):
        if out.get(name) is not None:
            out[name] = bound(_checked(out[name], name, max_chars))
    memory_id = out.get("memoryId")
    if method in MEMORY_ID_METHODS and isinstance(memory_id, str) \
            and memory_id.startswith(SESSION_MEMORY):
        client_id = _checked(memory_id[len(SESSION_MEMORY):], "memoryId", max_chars)
        out["memoryId"] = SESSION_MEMORY + bound(client_id)
    return out, back


def unbind_result(result: Any, back: Mapping[str, str]) -> Any:
    """``result`` with a ``memoryId`` naming a bound session named by the client's id again."""
    if not back or not isinstance(result, dict):
        return result
    memory_id = result.get("memoryId")
    if isinstance(memory_id, str) and memory_id.startswith(SESSION_MEMORY) \
            and memory_id[len(SESSION_MEMORY):] in back:
        return {**result, "memoryId": SESSION_MEMORY + back[memory_id[len(SESSION_MEMORY):]]}
    return result
