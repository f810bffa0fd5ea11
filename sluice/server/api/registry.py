"""The typed table from API key to handler: each registration is checked by mypy against the
API's request and response classes (``Api[FetchRequest, FetchResponse]``), so a handler wired to
the wrong API, or answering with the wrong message, fails the type check instead of a client.

At run time the table is a plain dict by key (one lookup per request); the types live in
:meth:`HandlerRegistry.register`'s signature.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeAlias, TypeVar

from sluice.protocol.messages import RequestHeader
from sluice.protocol.schema import Api, RequestMessage, ResponseMessage
from sluice.server.network.request import CloseConnection

__all__ = ["Answer", "HandlerRegistry"]

Req = TypeVar("Req", bound=RequestMessage[Any])
Resp = TypeVar("Resp", bound=ResponseMessage)

#: What a handler returns (``Answer[FetchResponse]``): the response; an awaitable for it when
#: the request waits (long-poll Fetch, acks=-1 Produce, group joins, cluster admin); None (now or
#: awaited) to send nothing (acks=0 Produce); ``network.request.CLOSE_CONNECTION`` (now or
#: awaited) to close the connection instead (an acks=0 Produce that failed).
Answer: TypeAlias = Resp | Awaitable[Resp | CloseConnection | None] | CloseConnection | None


class HandlerRegistry:
    """API key -> handler, registered with the API's typed declaration."""

    __slots__ = ("_handlers",)

    def __init__(self) -> None:
        self._handlers: dict[int, Callable[[RequestHeader, Any], object]] = {}

    def register(
        self,
        api: Api[Req, Resp],
        handler: Callable[[RequestHeader, Req], Answer[Resp]],
    ) -> None:
        """Serve ``api`` with ``handler`` (a later registration of the same API replaces it)."""
        self._handlers[api.key] = handler

    def __delitem__(self, api_key: int) -> None:
        """Stop serving ``api_key`` (it is no longer advertised)."""
        del self._handlers[api_key]

    def __getitem__(self, api_key: int) -> Callable[[RequestHeader, Any], object]:
        return self._handlers[api_key]

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._handlers

    def __iter__(self) -> Iterator[int]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)
