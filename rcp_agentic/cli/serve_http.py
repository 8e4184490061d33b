"""``serve --http``: the engine as "default" and each ``--index NAME=DIR`` beside it, every one
warmed before the socket listens; the bearer token from ``$RCP_AGENTIC_TOKEN``, and a loud
warning when a non-loopback address answers without one."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidParams
from ..protocol.listener import ServerLimits
from .engines import backend_overrides, say_ready, warm

if TYPE_CHECKING:
    from ..engine import Engine


def serve_http(engine: Engine, args: argparse.Namespace) -> None:
    """Serve ``engine`` and the hosted indexes over HTTP until stopped; close them all. The
    hosted indexes share the main engine's embedding model."""
    from ..engine import Engine
    from ..protocol.http import serve_http as serve

    hosted = {"default": engine}
    try:
        for name, path in _hosted_indexes(args.index).items():
            hosted[name] = Engine(path, embedder=engine.embedder.inner,
                                  **backend_overrides(args))
        token = os.environ.get("RCP_AGENTIC_TOKEN") or None
        _warn_if_exposed(args.host, token, args.allow_anonymous_writes)
        reports = [warm(e, args) for e in hosted.values()]

        def listening(url: str) -> None:
            print(f"rcp-agentic: serving RCP/1 on {url}/rcp", file=sys.stderr, flush=True)
            say_ready("http", engine, reports[0], url)

        limits = ServerLimits(header_timeout=args.header_timeout,
                              body_timeout=args.body_timeout,
                              keep_alive_timeout=args.timeout_keep_alive,
                              max_connections=args.limit_concurrency)
        serve(engine, host=args.host, port=args.port, token=token,
              cors_origins=args.cors_origin, hosted_engines=hosted,
              stateful=args.stateful, allowed_hosts=args.allowed_host,
              allow_anonymous_writes=args.allow_anonymous_writes, limits=limits,
              on_listening=listening)
    finally:
        for other in hosted.values():
            other.close()


def _hosted_indexes(specs: list[str]) -> dict[str, Path]:
    """``--index NAME=DIR`` options as names to engine folders (each must hold an engine)."""
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InvalidParams(f"--index takes NAME=DIR, not {spec!r}", field="index")
        if name in out:
            raise InvalidParams(f"--index {name!r} given twice", field="index")
        if not (Path(path) / "engine.db").exists():
            raise InvalidParams(f"--index {name}: no engine at {path}", field="index")
        out[name] = Path(path)
    return out


def _warn_if_exposed(host: str, token: str | None, anonymous_writes: bool) -> None:
    """Say loudly on stderr when a non-loopback server answers callers without a token."""
    from ..protocol.guard import is_loopback

    if token is not None or is_loopback(host):
        return
    what = "reads AND WRITES" if anonymous_writes else "reads"
    print(f"rcp-agentic: WARNING: listening on {host}, which is not loopback, without a "
          f"bearer token: anyone who can reach this address can make {what}. Set "
          "$RCP_AGENTIC_TOKEN, or bind to 127.0.0.1.", file=sys.stderr, flush=True)
