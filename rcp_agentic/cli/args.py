"""The options several commands share (where recall runs, the LLM endpoint) and the number
types of their arguments."""

from __future__ import annotations

import argparse
from typing import Any


def _at_least_zero(text: str) -> int:
    """An argument type: an integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value


# argparse names a type by its function in an error ("invalid _at_least_zero value: 'x'"), so
# the function keeps the name it had in cli.py (and positive's the name ``parse``).
at_least_zero = _at_least_zero


def positive(kind: type) -> Any:
    """An argument type: a ``kind`` (int, float) > 0."""
    def parse(text: str) -> Any:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
        return value

    return parse


def add_backend_args(parser: argparse.ArgumentParser) -> None:
    """``--chroma-url``, ``--backend``, ``--milvus-uri``: where recall runs."""
    parser.add_argument("--chroma-url", metavar="URL", help="use a `chroma run` server")
    parser.add_argument("--backend", choices=("embedded", "milvus"),
                        help="where recall runs (default: the engine's saved choice, else "
                        "embedded); see docs/scaling.md")
    parser.add_argument("--milvus-uri", metavar="URI",
                        help="with --backend milvus: a path ending in .db (Milvus Lite) or "
                        "http://host:19530 (also RCP_AGENTIC_MILVUS_URI)")


def add_llm_args(parser: argparse.ArgumentParser) -> None:
    """The ``LLM`` group: the endpoint, model, key variable and a build's token budget."""
    llm = parser.add_argument_group(
        "LLM", "an OpenAI-compatible endpoint for LLM summaries, graph extraction, community "
        "reports and query transforms (the key is read from the environment, never saved)")
    llm.add_argument("--llm-base-url", metavar="URL",
                     help="e.g. http://127.0.0.1:8080/v1 (llama.cpp, vLLM, Ollama) or "
                     "https://api.openai.com/v1")
    llm.add_argument("--llm-model", metavar="NAME", help="the model to call")
    llm.add_argument("--llm-api-key-env", metavar="VAR",
                     help="environment variable holding the key (default OPENAI_API_KEY)")
    llm.add_argument("--llm-token-budget", dest="llm_build_token_budget", type=positive(int),
                     metavar="N", help="LLM tokens one build may spend; past it the build stops "
                     "cleanly and the next run goes on from the LLM cache")
