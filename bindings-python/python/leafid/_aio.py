"""asyncio glue of the native module (``leafid._leafid``): the core runs each async call
on its own runtime and settles the future made here, from another thread, through
``call_soon_threadsafe``; an id at hand is set at once, or (every so often) at the
loop's next turn (``settle_soon``)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Optional, Tuple, Type, TypeVar, cast

_T = TypeVar("_T")


def new_future() -> Tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]"]:
    """The running loop and a fresh future on it (``RuntimeError`` outside a coroutine)."""
    loop = asyncio.get_running_loop()
    return loop, loop.create_future()


class Connecting(asyncio.Future[_T]):
    """A generator being connected (what ``connect`` returns): an ``asyncio.Future``, so
    ``gen = await SegmentGenerator.connect(url)`` gives the generator, and also an async
    context manager, so ``async with SegmentGenerator.connect(url) as gen:`` connects,
    and closes the generator at the end of the block (``aclose()``)."""

    async def __aenter__(self) -> _T:
        generator: Any = await self
        return cast(_T, await generator.__aenter__())

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        generator: Any = self.result()
        await generator.__aexit__(exc_type, exc, tb)


def new_connecting() -> Tuple[asyncio.AbstractEventLoop, "Connecting[Any]"]:
    """``new_future`` for ``connect``: the future is a ``Connecting``."""
    loop = asyncio.get_running_loop()
    return loop, Connecting(loop=loop)


def settle(
    loop: asyncio.AbstractEventLoop,
    future: "asyncio.Future[Any]",
    value: Any,
    error: Optional[BaseException],
) -> None:
    """Called from a core thread: schedules the result on the future's loop."""
    try:
        loop.call_soon_threadsafe(_set, future, value, error)
    except RuntimeError:
        pass  # the loop is closed: nobody is waiting any more


def _set(future: "asyncio.Future[Any]", value: Any, error: Optional[BaseException]) -> None:
    if future.done():
        return  # cancelled meanwhile
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def settle_soon(
    loop: asyncio.AbstractEventLoop, future: "asyncio.Future[Any]", value: Any
) -> None:
    """On the loop's thread: sets ``value`` at the loop's next turn, so that an ``await``
    of ``future`` lets the loop run its timers and other tasks first (an id at hand,
    every so often; see ``at_hand_or`` in ``src/aio.rs``)."""
    # If the future is cancelled before then, ``_set`` drops ``value``: that id is
    # never issued, a gap in the sequence, never a duplicate.
    loop.call_soon(_set, future, value, None)


def ready(value: Any) -> "asyncio.Future[Any]":
    """A future on the running loop that is already done with ``value``."""
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
