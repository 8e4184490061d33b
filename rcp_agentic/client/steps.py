"""Logic written once for the sync and the asyncio paths: a generator of I/O steps, two drivers.

A call that needs I/O is written as a generator that yields each step it needs (send this
frame, wait this long, connect that engine) and receives the step's outcome: the value is
sent back in, a failure raised where the step was yielded. Its return value is the call's.
:func:`adrive` awaits the steps, :func:`drive` performs them with blocking calls (by running
:func:`adrive` over a ``perform`` that never suspends), so the decisions (retry or not, how
long, what to ask next) exist once and neither driver decides anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

S = TypeVar("S")
T = TypeVar("T")


def drive(steps: Generator[S, Any, T], perform: Callable[[S], Any]) -> T:
    """Run ``steps`` to its return value, each step done by ``perform`` (blocking)."""
    async def now(step: S) -> Any:
        return perform(step)

    # adrive over a perform that never suspends: the coroutine ends within its first send.
    run = adrive(steps, now)
    try:
        run.send(None)
    except StopIteration as done:
        return done.value
    run.close()
    raise RuntimeError("a blocking step suspended")


async def adrive(steps: Generator[S, Any, T], perform: Callable[[S], Awaitable[Any]]) -> T:
    """Run ``steps`` to its return value, each step done by awaiting ``perform``."""
    try:
        step = next(steps)
        while True:
            try:
                value = await perform(step)
            except Exception as exc:  # noqa: BLE001 - raised inside the steps, where they asked
                step = steps.throw(exc)
            else:
                step = steps.send(value)
    except StopIteration as done:
        return done.value
    finally:
        steps.close()
