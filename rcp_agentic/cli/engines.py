"""The engine a command runs on: ``--engine`` (default ``$RCP_AGENTIC_ENGINE``, else
``./.rcp-agentic``) opened with the command's storage and LLM flags; warming it and saying
that a server is ready. The engine (and torch with it) is imported when a command runs, never
to parse one: ``rcp-agentic --help`` stays fast."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidParams
from .output import say

if TYPE_CHECKING:
    from ..engine import Engine
    from ..warm import WarmReport


def engine_dir(arg: str | None) -> Path:
    """The engine folder ``--engine`` names, else the default one."""
    from ..engine import default_engine_dir

    return Path(arg) if arg else default_engine_dir()


def open_engine(args: argparse.Namespace, *, create: bool, catch_up: bool = False,
                **overrides: Any) -> Any:
    """The engine of ``--engine``. A command builds derived units in the background only
    when it serves (``catch_up``: lagging kinds caught up at open, each write's built off
    the write path, unless configured inline); ``index`` builds them inline in its own
    write, and a read command reports the lag instead of waiting for a builder at exit."""
    from ..engine import Engine

    path = engine_dir(args.engine)
    if not create and not (path / "engine.db").exists():
        raise InvalidParams(f"no engine at {path}: run `rcp-agentic index PATH --engine {path}` "
                            "first", field="engine")
    engine = Engine(path, catch_up=catch_up,
                    derived_updates=None if catch_up else "inline",
                    **backend_overrides(args), **_llm_overrides(args), **overrides)
    if engine.chat is not None and not catch_up and not getattr(args, "quiet", False):
        engine.chat.progress = _llm_progress()
    return engine


def backend_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The storage flags of a command (unset ones leave the engine's saved config)."""
    return {"chroma_url": getattr(args, "chroma_url", None),
            "backend": getattr(args, "backend", None),
            "milvus_uri": getattr(args, "milvus_uri", None)}


def _llm_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The LLM flags of a command (unset ones leave the engine's saved config)."""
    return {name: getattr(args, name, None) for name in (
        "llm_base_url", "llm_model", "llm_api_key_env", "llm_max_tokens", "llm_timeout_seconds",
        "llm_retries", "llm_concurrency", "llm_build_token_budget")}


def _llm_progress() -> Any:
    """A progress callback drawing one bar per LLM stage on stderr."""
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None or bar.total != total:
            if bar is not None:
                bar.close()
            bar = bars[stage] = tqdm(total=total, desc=f"LLM {stage}", unit="call",
                                     file=sys.stderr, leave=False)
        bar.n = done
        bar.refresh()
        if done >= total:
            bar.close()
            del bars[stage]

    return progress


def warm(engine: Engine, args: argparse.Namespace) -> WarmReport | None:
    """``engine.warm()`` unless ``--no-warm`` (then None); anything loading prints goes to
    stderr (over stdio, stdout carries only protocol frames)."""
    if args.no_warm:
        return None
    with contextlib.redirect_stdout(sys.stderr):
        return engine.warm()


def say_ready(transport: str, engine: Engine, report: WarmReport | None,
              url: str | None = None) -> None:
    """The ready line of a server, on stderr."""
    from ..warm import ready_line

    say(ready_line(transport, report, engine.index_version, url), err=True)
