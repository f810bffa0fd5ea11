"""What the property tests share: a virtual-time event loop and a scratch directory."""

from __future__ import annotations

import asyncio
import os
import time

#: tmpfs when there is one: logs fsync their checkpoints, and a disk's fsync costs milliseconds.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None

#: asyncio's loop runs a timer once ``when < time() + this``.
CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the test moves it (``now``, seconds): timers
    fire exactly then, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 1000.0
        super().__init__()

    def time(self) -> float:
        return self.now

    def run_step(self, step: object = None, yields: int = 5) -> object:
        """Call ``step`` (if callable) on the loop, then let what it woke run: ``yields`` loop
        iterations, bounded (a woken task finishes within a few; nothing here does I/O)."""

        async def body() -> object:
            result = step() if callable(step) else None
            for _ in range(yields):
                await asyncio.sleep(0)
            return result

        return self.run_until_complete(body())
