"""Giving the heap an ended session freed back to the operating system.

A session's buffers (a peer that never read its answers, a flood's decoded frames) are freed
when it retires, but glibc keeps freed heap memory mapped for the next allocation, so a receiver
that survived an attack stays at its peak RSS (docs/abuse.md, "RSS back to baseline"). After a
session retires the engine asks glibc to return free pages (``malloc_trim(0)``), as a server
under memory pressure does (Envoy's ``shrink_heap`` overload action, for tcmalloc): at most once
per ``interval_s``, on the loop, never on a hot path (a retirement is rare). Elsewhere (musl,
macOS) there is no such call and nothing happens.
"""

from __future__ import annotations

import asyncio
import ctypes
import sys
import time
from collections.abc import Callable

__all__ = ["HeapTrim", "malloc_trim"]


def _load() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the C library this process already runs on
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)  # glibc's; musl has none
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


malloc_trim: Callable[[int], int] | None = _load()
"""glibc's ``malloc_trim`` (``None`` where the C library has none)."""


class HeapTrim:
    """Trims the heap soon after :meth:`request`, at most once per ``interval_s`` (loop thread
    only). Each trim runs ``interval_s`` after the request that scheduled it, so the buffers
    of a connection still closing are gone by then; requests meanwhile join that trim."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        interval_s: float = 1.0,
        trim: Callable[[int], int] | None = malloc_trim,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0: {interval_s!r}")
        self._loop = loop
        self._interval = interval_s
        self._trim = trim
        self._clock = clock
        self._handle: asyncio.TimerHandle | None = None
        self._last = -interval_s
        self.trims = 0
        """Trims run (``tent_transport_heap_trims``)."""

    def request(self) -> None:
        if self._trim is None or self._handle is not None:
            return
        delay = max(self._interval, self._last + self._interval - self._clock())
        self._handle = self._loop.call_later(delay, self._run)

    def _run(self) -> None:
        self._handle = None
        self._last = self._clock()
        assert self._trim is not None  # only scheduled with one
        self.trims += 1
        self._trim(0)  # its answer (whether anything was returned) changes nothing here

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
