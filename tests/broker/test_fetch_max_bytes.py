"""``fetch.max.bytes`` (Kafka's key and default, issue 13): the broker caps every Fetch
response at it whatever ``max_bytes`` the request asks for, with zero copy on and off (the copy
path holds the whole response in memory); the first batch may exceed it (KIP-74), and reading
on gets everything."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.protocol import messages as m
from sluice.protocol.records import iter_batches
from sluice.server.config import Config
from tests.broker.test_server import batch, create_topic, fetch_request, produce, start_server
from tests.broker_util import WireClient

CAP = 64 * 1024


def test_the_default_is_kafkas() -> None:
    assert Config().fetch_max_bytes == 57671680


@pytest.mark.parametrize("zero_copy", ["true", "false"])
async def test_fetch_responses_are_capped(tmp_path: Path, zero_copy: str) -> None:
    server = await start_server(
        tmp_path, f"fetch.max.bytes={CAP}", f"sluice.fetch.zero.copy={zero_copy}"
    )
    client = await WireClient.connect("127.0.0.1", server.port)
    try:
        assert await create_topic(client, "big", 4) == 0
        sent = 0
        for p in range(4):
            for i in range(8):  # 8 batches of ~10 KiB per partition: 320 KiB in all
                assert (await produce(client, "big", batch(10, start=i * 10, size=1000),
                                      partition=p)).error_code == 0  # fmt: skip
                sent += 10
        offsets = dict.fromkeys(range(4), 0)
        got = 0
        for _ in range(100):
            req = fetch_request("big", 0, max_bytes=50 * 1024 * 1024, min_bytes=1 << 30)
            req.topics[0].partitions = [
                m.FetchRequest.FetchPartition(partition=p, fetch_offset=offsets[p],
                                              partition_max_bytes=10 * 1024 * 1024)
                for p in range(4)
            ]  # fmt: skip
            resp = await client.request(m.Fetch.key, 11, req)
            sizes = [len(bytes(p.records or b"")) for p in resp.responses[0].partitions]
            assert 0 < sum(sizes) <= CAP, sizes  # min_bytes capped too: no wait for 1 GiB
            for part in resp.responses[0].partitions:
                for _pos, header, _batch in iter_batches(
                    bytes(part.records or b""), allow_partial_tail=True
                ):
                    got += header.record_count
                    offsets[part.partition_index] = header.next_offset
            if got == sent:
                break
        assert got == sent
    finally:
        await client.close()
        await server.shutdown()
