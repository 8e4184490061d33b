"""``rcp-agentic serve --stdio|--http``: serve the engine over RCP/1, warmed first unless
``--no-warm``, with a ready line on stderr once it answers. Over stdio here; over HTTP (hosted
indexes, the bearer token, the connection limits) in :mod:`.serve_http`."""

from __future__ import annotations

import argparse
from typing import Any

from ..protocol.listener import ServerLimits
from .args import add_backend_args, add_llm_args, positive
from .engines import open_engine, say_ready, warm
from .serve_http import serve_http


def add_command(sub: Any) -> None:
    """The ``serve`` sub-parser."""
    srv = sub.add_parser("serve", help="serve the engine over RCP/1")
    how = srv.add_mutually_exclusive_group(required=True)
    how.add_argument("--stdio", action="store_true",
                     help="newline-delimited JSON-RPC on stdin/stdout (logs go to stderr)")
    how.add_argument("--http", action="store_true",
                     help="POST /rcp/<method>; bearer token from $RCP_AGENTIC_TOKEN if set "
                     "(writes need one unless --allow-anonymous-writes)")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8750)
    srv.add_argument("--engine", metavar="DIR")
    add_backend_args(srv)
    add_llm_args(srv)
    srv.add_argument("--no-warm", action="store_true",
                     help="serve at once, loading the model and the index's structures on "
                     "first use (the first requests are slower); by default they are loaded "
                     "before the ready line")
    srv.add_argument("--index", action="append", default=[], metavar="NAME=DIR",
                     help="(HTTP) also serve the engine in DIR as index_id NAME on "
                     "/api/v1/retrieval/retrieve; the main engine is index_id 'default'")
    srv.add_argument("--stateful", action="store_true",
                     help="(HTTP) keep the initialize lifecycle per RCP-Session header (one "
                     "shared session without it) instead of answering statelessly")
    srv.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                     help="(HTTP) allow browser calls from ORIGIN; no CORS headers otherwise "
                     "(other origins are refused with 403)")
    srv.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                     help="(HTTP) also answer requests whose Host header is NAME (besides the "
                     "--host address and loopback names; '*' for any); others get 421")
    srv.add_argument("--allow-anonymous-writes", action="store_true",
                     help="(HTTP) without $RCP_AGENTIC_TOKEN, let callers without a token "
                     "use index/add, index/delete, feedback (refused with 401 otherwise)")
    srv.add_argument("--header-timeout", type=positive(float),
                     default=ServerLimits.header_timeout, metavar="S",
                     help="(HTTP) close a connection whose request head takes longer "
                     "(%(default)g)")
    srv.add_argument("--body-timeout", type=positive(float), default=ServerLimits.body_timeout,
                     metavar="S", help="(HTTP) answer 408 to a request body that takes longer "
                     "(%(default)g)")
    srv.add_argument("--timeout-keep-alive", type=positive(float),
                     default=ServerLimits.keep_alive_timeout, metavar="S",
                     help="(HTTP) close an idle keep-alive connection after S seconds "
                     "(%(default)g)")
    srv.add_argument("--limit-concurrency", type=positive(int), metavar="N",
                     help="(HTTP) answer 503 past N open connections (default: what the "
                     "open-file limit allows, at most 4096)")
    srv.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until stdin closes (stdio) or the process is stopped (HTTP)."""
    engine = open_engine(args, create=True, catch_up=True)
    if args.http:
        serve_http(engine, args)
    else:
        from ..protocol.stdio import serve_stdio

        try:
            report = warm(engine, args)
            say_ready("stdio", engine, report)
            serve_stdio(engine)
        finally:
            engine.close()
    return 0
