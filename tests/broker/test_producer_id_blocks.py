"""Cluster producer ids come from blocks (ZooKeeper's ``/latest_producer_id_block``): never
repeated, the next block fetched before the current one runs out, concurrent callers share one
allocation, and a failed allocation is retried by the next caller."""

from __future__ import annotations

import asyncio

import pytest

from sluice.server.metadata.producer_id_manager import BlockProducerIdManager


class Blocks:
    def __init__(self, size: int = 10) -> None:
        self.size = size
        self.taken: list[tuple[int, int]] = []
        self.fail_next = False
        self.gate: asyncio.Event | None = None

    async def __call__(self) -> tuple[int, int]:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("zookeeper unreachable")
        first = self.taken[-1][1] + 1 if self.taken else 0
        block = (first, first + self.size - 1)
        self.taken.append(block)
        return block


async def test_ids_are_unique_and_blocks_are_prefetched() -> None:
    blocks = Blocks()
    ids = BlockProducerIdManager(blocks)
    got = [await ids.generate() for _ in range(9)]
    assert got == list(range(9))
    # The 90% mark (id 9 of a block of 10) starts fetching the next block in the background.
    assert await ids.generate() == 9
    await asyncio.sleep(0)
    assert len(blocks.taken) == 2
    got = [await ids.generate() for _ in range(25)]
    assert got == list(range(10, 35))
    assert len(set(got)) == len(got)


async def test_concurrent_callers_share_one_allocation() -> None:
    blocks = Blocks(size=100)
    blocks.gate = asyncio.Event()
    ids = BlockProducerIdManager(blocks)
    waiting = [asyncio.create_task(ids.generate()) for _ in range(5)]
    await asyncio.sleep(0)
    blocks.gate.set()
    assert sorted(await asyncio.gather(*waiting)) == [0, 1, 2, 3, 4]
    assert blocks.taken == [(0, 99)]


async def test_a_failed_allocation_raises_and_the_next_call_retries() -> None:
    blocks = Blocks()
    blocks.fail_next = True
    ids = BlockProducerIdManager(blocks)
    with pytest.raises(ConnectionError):
        await ids.generate()
    assert await ids.generate() == 0
