"""Who sends a request, as its transport knows it, and what that caller is offered (§13.2,
§15.6).

Capabilities say what the caller may call: a caller that may not write (anonymous over
HTTP, no token configured, anonymous writes not allowed) is offered neither ``index`` nor
``feedback``, and ``memory`` for its own session only (``scope: "session"`` changes only
that caller's session state; ``scope: "global"`` is a corpus write). The trusted callers —
in process and the process that spawned a stdio server (§15.6) — may write.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Caller:
    """One request's caller: ``writes`` is whether it may change what the server holds."""

    writes: bool = True


TRUSTED = Caller()


def read_only(caps: dict[str, Any]) -> dict[str, Any]:
    """``caps`` as offered to a caller that may not write: no ``index``, no ``feedback``,
    and ``memory`` only with its ``session`` scope (dropped when that scope is not offered)."""
    out = copy.deepcopy(caps)
    out.pop("index", None)
    out.pop("feedback", None)
    memory = out.get("memory")
    if isinstance(memory, dict):
        if "session" in (memory.get("scopes") or ()):
            memory["scopes"] = ["session"]
        else:
            del out["memory"]
    return out
