"""The generated ``messages.pyi``: current with the declarations, faithful to the run-time
classes, and strict enough that mypy rejects a misspelt field."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from mypy import api as mypy_api

from sluice.protocol import codegen
from sluice.protocol import messages as m
from sluice.protocol.schema import Message, RequestMessage, ResponseMessage

ROOT = Path(__file__).resolve().parents[2]


def test_committed_stub_is_current() -> None:
    assert codegen.STUB_PATH.read_text() == codegen.render(), (
        "sluice/protocol/messages.pyi is stale: run python -m sluice.protocol.codegen"
    )


def test_check_mode_reports_a_stale_stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stub = tmp_path / "messages.pyi"
    monkeypatch.setattr(codegen, "STUB_PATH", stub)
    stub.write_text(codegen.render().replace("max_wait_ms", "max_wiat_ms"))
    assert codegen.main(["--check"]) == 1
    assert codegen.main([]) == 0
    assert codegen.main(["--check"]) == 0
    assert stub.read_text() == codegen.render()


def _runtime_members(cls: type[Message]) -> set[str]:
    """Nested struct classes reachable as attributes of ``cls`` at run time."""
    return {
        name
        for name, value in vars(cls).items()
        if isinstance(value, type) and issubclass(value, Message)
    }


def _stub_classes() -> dict[str, ast.ClassDef]:
    tree = ast.parse(codegen.STUB_PATH.read_text())
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _check_class(node: ast.ClassDef, cls: type[Message], top: bool) -> None:
    nested = {n.name: n for n in node.body if isinstance(n, ast.ClassDef)}
    aliases = {
        n.target.id
        for n in node.body
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and isinstance(n.annotation, ast.Name)
        and n.annotation.id == "TypeAlias"
    }
    fields = [
        n.target.id
        for n in node.body
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and n.target.id not in aliases
    ]
    assert fields == list(cls._slots), cls.__name__
    assert set(nested) | aliases == _runtime_members(cls), cls.__name__
    if not top:
        assert not aliases, cls.__name__
    for name, sub in nested.items():
        _check_class(sub, getattr(cls, name), top=False)


def test_stub_declares_what_exists_at_run_time() -> None:
    classes = _stub_classes()
    exported = {
        name
        for name, value in vars(m).items()
        if isinstance(value, type) and issubclass(value, Message) and value is not Message
    }
    assert set(classes) == exported
    for name, node in classes.items():
        _check_class(node, getattr(m, name), top=True)
    # nested classes two levels down are on the top-level class too, as set_owner puts them
    assert m.ProduceResponse.PartitionProduceResponse is (
        m.ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    )


def test_request_and_response_classes_have_their_bases() -> None:
    for api in m.APIS.values():
        assert issubclass(api.request.cls, RequestMessage), api.name
        assert issubclass(api.response.cls, ResponseMessage), api.name
        assert not issubclass(api.request.cls, ResponseMessage), api.name
    assert not issubclass(m.RequestHeader, RequestMessage | ResponseMessage)
    # the new bases add no per-instance storage: the codecs' objects stay slot-only
    assert not hasattr(m.FetchRequest(), "__dict__")


def _mypy(tmp_path: Path, source: str) -> tuple[str, int]:
    """Type-check ``source`` (a module importing sluice) the way the project does."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(textwrap.dedent(source))
    out, err, status = mypy_api.run(
        [
            str(snippet),
            "--strict",
            "--follow-imports=silent",  # judge the snippet, not the modules it imports
            "--cache-dir",
            str(tmp_path / "mypy_cache"),
            "--python-version",
            "3.11",
        ]
    )
    return out + err, status


FETCH_SNIPPET = """
    from sluice.protocol.messages import FetchRequest

    def wait_of(body: FetchRequest) -> int:
        return body.{field}
"""


@pytest.mark.slow
def test_mypy_rejects_a_misspelt_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    report, status = _mypy(tmp_path, FETCH_SNIPPET.format(field="max_wiat_ms"))
    assert status == 1, report
    assert '"FetchRequest" has no attribute "max_wiat_ms"' in report

    report, status = _mypy(tmp_path, FETCH_SNIPPET.format(field="max_wait_ms"))
    assert status == 0, report


CLIENT_SNIPPET = """
    from sluice.net.connection import Connection
    from sluice.protocol.messages import Fetch, FetchRequest

    async def high_watermark(conn: Connection) -> int:
        response = await conn.request(Fetch.key, FetchRequest(max_wait_ms=0))
        return response.responses[0].partitions[0].{field}
"""


@pytest.mark.slow
def test_mypy_types_client_responses_by_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connection.request of a FetchRequest is checked as returning a FetchResponse."""
    monkeypatch.chdir(ROOT)
    report, status = _mypy(tmp_path, CLIENT_SNIPPET.format(field="high_watermarc"))
    assert status == 1, report
    assert '"PartitionData" has no attribute "high_watermarc"' in report

    report, status = _mypy(tmp_path, CLIENT_SNIPPET.format(field="high_watermark"))
    assert status == 0, report
