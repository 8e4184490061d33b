"""Capability gating before any I/O (§6, §14.4): advertised methods, advertised options, maxK.

A conforming client never calls an unadvertised method and never passes an
unadvertised option unless ``strict`` is false (§7.7). These checks run on the
capabilities cached from ``initialize`` (§13.2) and on wire-named params, so a
refused call raises before a single byte is sent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..options import OPTIONS, VENDOR
from ..protocol.methods import RCP_METHODS
from .errors import CapabilityMissing, OptionUnsupported

# Absent `retrieve.units` means chunk/passage only (§6.1); absent modalities mean text (§4.8).
DEFAULT_UNITS = ("chunk", "passage")
DEFAULT_MODALITIES = ("text",)
# The vendor retrieve options that are true/false switches (``x-rcp-agentic-graphRecall``); a
# server offering one says so with ``capabilities["x-rcp-agentic"]["graphRecall"]: true``.
_VENDOR_SWITCHES = tuple(o.wire for o in OPTIONS if o.vendor and o.boolean)


def switch_offered(wire: str, caps: Mapping[str, Any]) -> bool:
    """Whether the server advertises the vendor switch ``wire`` (an ``x-rcp-agentic-<name>``
    retrieve option) as ``capabilities["x-rcp-agentic"][<name>]: true``."""
    return _obj(caps, VENDOR).get(wire.removeprefix(f"{VENDOR}-")) is True


def _obj(mapping: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = mapping.get(key)
    return value if isinstance(value, Mapping) else {}


def _list(mapping: Mapping[str, Any], key: str, default: tuple[str, ...] = ()) -> tuple[Any, ...]:
    value = mapping.get(key)
    return tuple(value) if isinstance(value, list) else default


def check_method(method: str, caps: Mapping[str, Any]) -> None:
    """Raise CapabilityMissing if ``method`` needs a capability the server did not advertise.

    Methods RCP/1 does not define (and are not ``x-`` extensions) pass: the server
    answers them with -32004, which a client cannot pre-empt for a newer server.
    """
    if method.startswith("x-"):  # x-acme/foo needs an x-acme or x-acme-* capability (§6.2)
        vendor = method.split("/", 1)[0]
        if not any(key == vendor or key.startswith(vendor + "-") for key in caps):
            raise CapabilityMissing(f"{method} needs the {vendor!r} capability, which the server "
                                    "did not advertise")
        return
    cap = RCP_METHODS.get(method)
    if cap is None:
        return
    if cap not in caps:
        raise CapabilityMissing(f"{method} needs the {cap!r} capability, which the server did not "
                                "advertise")
    if method == "index/add" and _obj(caps, "index").get("writable") is not True:
        raise CapabilityMissing("index/add needs index.writable, which the server did not "
                                "advertise")


def _unsupported(option: str, value: Any, offered: Any) -> OptionUnsupported:
    return OptionUnsupported(f"{option}={value!r} is not advertised by the server (offered: "
                             f"{offered!r}); pass strict=False to let the server degrade",
                             option=option)


def _filter_operators(node: Any) -> Iterator[Any]:
    if isinstance(node, Mapping):
        for key in ("and", "or"):
            if isinstance(node.get(key), list):
                for child in node[key]:
                    yield from _filter_operators(child)
        if "not" in node:
            yield from _filter_operators(node["not"])
        if "op" in node:
            yield node["op"]


def _check_retrieve(params: Mapping[str, Any], caps: Mapping[str, Any]) -> None:
    r = _obj(caps, "retrieve")
    if "mode" in params and params["mode"] not in _list(r, "modes"):
        raise _unsupported("mode", params["mode"], _list(r, "modes"))
    fusion = params.get("fusion")
    if isinstance(fusion, Mapping) and "method" in fusion \
            and fusion["method"] not in _list(r, "fusion"):
        raise _unsupported("fusion.method", fusion["method"], _list(r, "fusion"))
    rerank = params.get("rerank")
    if rerank is not None and rerank is not False:
        if r.get("rerankBuiltin") is not True:
            raise _unsupported("rerank", rerank, "rerankBuiltin is not advertised")
        methods = _list(_obj(caps, "rerank"), "methods")
        if isinstance(rerank, Mapping) and "method" in rerank and "rerank" in caps \
                and rerank["method"] not in methods:
            raise _unsupported("rerank.method", rerank["method"], methods)
    rewrite = params.get("rewrite")
    if rewrite is not None and rewrite is not False:
        methods = _list(_obj(caps, "transform"), "methods")
        if rewrite not in methods:  # retrieve.rewrite is the transform stage (§3.1)
            raise _unsupported("rewrite", rewrite, methods if "transform" in caps
                               else "transform is not advertised")
    if params.get("mmr") is not None and r.get("mmr") is not True:
        raise _unsupported("mmr", params["mmr"], "mmr is not advertised")
    if "unit" in params and params["unit"] not in _list(r, "units", DEFAULT_UNITS):
        raise _unsupported("unit", params["unit"], _list(r, "units", DEFAULT_UNITS))
    level = params.get("level")
    if level not in (None, 0):
        levels = r.get("levels")
        if not isinstance(level, int) or not isinstance(levels, int) or not 0 <= level < levels:
            raise _unsupported("level", level, f"levels={levels!r}")
    if params.get("tokenBudget") is not None and r.get("tokenBudget") is not True:
        raise _unsupported("tokenBudget", params["tokenBudget"], "tokenBudget is not advertised")
    modalities = _list(r, "modalities", DEFAULT_MODALITIES)
    if "modality" in params and params["modality"] not in modalities:
        raise _unsupported("modality", params["modality"], modalities)
    if params.get("indexVersion") is not None and r.get("snapshots") is not True:
        raise _unsupported("indexVersion", params["indexVersion"], "snapshots are not advertised")
    # A vendor switch (x-rcp-agentic-graphRecall) is sent only where the server advertises it.
    for wire in _VENDOR_SWITCHES:
        if params.get(wire) and not switch_offered(wire, caps):
            raise _unsupported(wire, params[wire], "not advertised under capabilities"
                                                   f"[{VENDOR!r}]")
    if params.get("cursor") is not None and "pagination" not in caps:
        raise _unsupported("cursor", params["cursor"], "pagination is not advertised")
    if params.get("filter") is not None:
        if "filter" not in caps:
            raise _unsupported("filter", params["filter"], "filter is not advertised")
        operators = _obj(caps, "filter").get("operators")
        if isinstance(operators, list):
            for op in _filter_operators(params["filter"]):
                if op not in operators:
                    raise _unsupported("filter.op", op, operators)


def _check_embed(params: Mapping[str, Any], caps: Mapping[str, Any]) -> None:
    embed = _obj(caps, "embed")
    encoding = params.get("encoding", "json")
    encodings = ("json", *_list(embed, "encodings"))  # json is always supported (§7.3.1)
    if encoding not in encodings:
        raise _unsupported("encoding", encoding, encodings)
    modalities = _list(embed, "modalities", DEFAULT_MODALITIES)
    for item in params.get("inputs") or ():
        if isinstance(item, Mapping) and item.get("type") not in ("text", *modalities):
            raise _unsupported("modality", item.get("type"), modalities)


def _check_rerank(params: Mapping[str, Any], caps: Mapping[str, Any]) -> None:
    methods = _list(_obj(caps, "rerank"), "methods")
    if "method" in params and params["method"] not in methods:
        raise _unsupported("method", params["method"], methods)


def _check_index_add(params: Mapping[str, Any], caps: Mapping[str, Any]) -> None:
    index = _obj(caps, "index")
    for option, flag in (("chunk", "chunking"), ("contextual", "contextual")):
        if params.get(option) and index.get(flag) is not True:
            raise _unsupported(option, params[option], f"index.{flag} is not advertised")


def _check_graph(params: Mapping[str, Any], caps: Mapping[str, Any]) -> None:
    ops = _list(_obj(caps, "graph"), "ops")
    if "op" in params and params["op"] not in ops:
        raise _unsupported("op", params["op"], ops)


def _check_transform(params: Mapping[str, Any], caps: Mapping[str, Any]) -> None:
    methods = _list(_obj(caps, "transform"), "methods")
    if "method" in params and params["method"] not in methods:
        raise _unsupported("method", params["method"], methods)


def _check_memory_build(params: Mapping[str, Any], caps: Mapping[str, Any]) -> None:
    scopes = _list(_obj(caps, "memory"), "scopes")
    if params.get("scope") is not None and params["scope"] not in scopes:
        raise _unsupported("scope", params["scope"], scopes)


_OPTION_CHECKS = {"retrieve": _check_retrieve, "embed": _check_embed, "rerank": _check_rerank,
                  "index/add": _check_index_add, "graph": _check_graph,
                  "memory/build": _check_memory_build, "query/transform": _check_transform}


def check_options(method: str, params: Mapping[str, Any], caps: Mapping[str, Any]) -> None:
    """Raise OptionUnsupported for the first option of ``params`` the server did not advertise."""
    check = _OPTION_CHECKS.get(method)
    if check is not None:
        check(params, caps)


def _bounds(method: str, params: Mapping[str, Any], caps: Mapping[str, Any]) -> dict[str, Any]:
    """The advertised upper bound of each count param of ``method``."""
    max_k = _obj(caps, "retrieve").get("maxK")
    limits = _obj(_obj(caps, "x-rcp-agentic"), "limits")
    if method == "retrieve":
        return {"k": max_k}
    if method == "graph":
        op = params.get("op")
        k = (max_k if op in ("local", "drift") else limits.get("maxCommunities")
             if op in ("global", "communities") else limits.get("maxGraphNodes"))
        return {"k": k, "hops": limits.get("maxGraphHops"),
                "tokenBudget": limits.get("maxSummaryTokens")}
    if method == "memory/recall":
        return {"n": limits.get("maxClues")}
    if method == "query/transform":
        return {"n": limits.get("maxTransformQueries")}
    return {}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def clamp(method: str, params: dict[str, Any], caps: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with ``k`` pre-clamped to ``retrieve.maxK`` — and ``graph``'s ``k``/``hops``,
    ``memory/recall``'s and ``query/transform``'s ``n`` to their advertised limits (§4.7:
    advertised bounds are authoritative)."""
    out = params
    for name, bound in _bounds(method, params, caps).items():
        if _count(bound) and _count(params.get(name)) and params[name] > bound:
            out = {**out, name: bound}
    return out
