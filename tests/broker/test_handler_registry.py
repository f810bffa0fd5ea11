"""The handler table is typed: mypy rejects a handler registered for an API whose request or
response it does not take or give (``sluice.server.api.registry``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mypy import api as mypy_api

WIRING = """
from sluice.protocol import messages as m
from sluice.protocol.messages import RequestHeader
from sluice.server.api.registry import HandlerRegistry


def produce(header: RequestHeader, body: m.ProduceRequest) -> m.ProduceResponse | None:
    raise NotImplementedError


async def heartbeat(header: RequestHeader, body: m.HeartbeatRequest) -> m.HeartbeatResponse:
    raise NotImplementedError


registry = HandlerRegistry()
registry.register(m.Produce, produce)
registry.register(m.Heartbeat, heartbeat)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        ("", None),
        ("registry.register(m.Fetch, produce)", "FetchRequest"),
    ],
)
def test_mypy_checks_each_registration(tmp_path: Path, wrong: str, expected: str | None) -> None:
    source = tmp_path / "wiring.py"
    source.write_text(textwrap.dedent(WIRING) + wrong + "\n")
    out, err, status = mypy_api.run(
        [
            "--strict",
            "--follow-imports=silent",  # this file's registrations, not the whole tree's strictness
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(source),
        ]
    )
    if expected is None:
        assert status == 0, out + err
    else:
        assert status == 1 and "[arg-type]" in out and expected in out, out + err


def test_every_api_is_wired_through_the_typed_table() -> None:
    """Each API the codec declares has its handler registered with ``register(m.<Api>, ...)``
    (so mypy checked it); ``ControlledShutdown`` is registered when the broker joins a cluster."""
    from sluice.protocol import messages as m
    from sluice.server.api import handlers

    source = Path(handlers.__file__).read_text()
    missing = [api.name for api in m.APIS.values() if f"register(m.{api.name}, " not in source]
    assert missing == []


def test_no_handler_is_typed_any() -> None:
    """mypy's check of a registration is only as good as the handler's annotations: a handler
    taking or returning ``Any`` passes it for every API. Each registered handler takes the
    ``RequestHeader`` and its API's request class and answers with its response class."""
    import inspect
    import re

    from sluice.server.api import handlers

    source = Path(handlers.__file__).read_text()
    registered = re.findall(r"\.register\(m\.(\w+), self\.(\w+)\)", source)
    assert len(registered) > 40
    wrong = {}
    for api, name in registered:
        signature = inspect.signature(getattr(handlers.Handlers, name))
        header, body = (str(p.annotation) for p in list(signature.parameters.values())[1:])
        answer = str(signature.return_annotation)
        if (
            header != "RequestHeader"
            or not re.fullmatch(rf"m\.{api}Request", body)
            or not re.search(rf"\bm\.{api}Response\b", answer)
            or re.search(r"\bAny\b", f"{header} {body} {answer}")
        ):
            wrong[name] = (header, body, answer)
    assert wrong == {}
