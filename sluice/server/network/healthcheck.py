"""Container healthcheck: is a broker answering the Kafka protocol at HOST:PORT?

``python -m sluice.server.network.healthcheck [HOST:PORT]`` sends one ApiVersions v0 request
and exits 0 when the broker answers it with error code 0, 1 otherwise (printing why). A TCP
connect alone would call a wedged broker healthy; a protocol round trip does not. Blocking
sockets on purpose: it is a one-shot process, not part of the server.
"""

from __future__ import annotations

import socket
import struct
import sys
from typing import cast

from sluice.protocol.errors import ProtocolError
from sluice.protocol.framing import decode_response, encode_request
from sluice.protocol.messages import ApiVersions, ApiVersionsRequest, ApiVersionsResponse

_API_VERSIONS = ApiVersions.key
_SIZE = struct.Struct(">i")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks += chunk
    return bytes(chunks)


def check(host: str, port: int, timeout: float = 3.0) -> str | None:
    """Return None when the broker is healthy, else a sentence saying why not."""
    request = encode_request(_API_VERSIONS, 0, 1, "sluice-healthcheck", ApiVersionsRequest())
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(request)
            (size,) = _SIZE.unpack(_recv_exactly(sock, 4))
            if not 0 < size <= 1 << 20:
                return f"implausible response size {size}"
            correlation_id, body = decode_response(_API_VERSIONS, 0, _recv_exactly(sock, size))
    except (OSError, ProtocolError) as exc:
        return f"{host}:{port}: {exc}"
    if correlation_id != 1:
        return f"correlation id {correlation_id} does not match the request's 1"
    # decode_response(_API_VERSIONS, ...) decodes an ApiVersionsResponse (its API's class).
    error_code = cast(ApiVersionsResponse, body).error_code
    if error_code != 0:
        return f"ApiVersions answered with error code {error_code}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = args[0] if args else "127.0.0.1:9092"
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        print(
            f"usage: python -m sluice.server.network.healthcheck [HOST:PORT] (got {target!r})",
            file=sys.stderr,
        )
        return 2
    problem = check(host, int(port))
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
