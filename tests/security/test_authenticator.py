"""The per-connection SASL state machine, driven by the request frames kafka-python builds and
the tokens of kafka-python's, aiokafka's and scramp's SASL clients."""

from __future__ import annotations

import struct
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.protocol import messages as m
from sluice.protocol.framing import decode_response
from sluice.server.security.authenticator import (
    DEFAULT_MAX_RECEIVE_SIZE,
    SaslServerAuthenticator,
    SaslState,
    Step,
)
from sluice.server.security.credentials import CredentialStore
from sluice.server.security.scram import credential_from_password

from .clients import PLAIN_CLIENTS, SCRAM_CLIENTS

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.metadata as kp_metadata
    import kafka.protocol.sasl as kp_sasl

ALL = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class MemoryStore(CredentialStore):
    """The in-memory part of the stores, filled directly."""

    def add(self, user: str, password: str) -> MemoryStore:
        self._users[user] = {
            mech: credential_from_password(mech, password)
            for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        }
        return self


STORE = MemoryStore().add("alice", "alice-secret").add("bob", "bob-secret")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def new_auth(mechanisms: list[str] = ALL, **kwargs: Any) -> SaslServerAuthenticator:
    return SaslServerAuthenticator(mechanisms, STORE, peer="127.0.0.1:5555", **kwargs)


def frame(req: Any, correlation_id: int = 1) -> bytes:
    """A request as kafka-python sends it, without the size prefix."""
    req.with_header(correlation_id=correlation_id, client_id="kp-client")
    return bytes(req.encode(header=True, framed=False))


def answer(step: Step, api_key: int, version: int) -> Any:
    assert len(step.send) == 1
    data = step.send[0]
    assert struct.unpack(">i", data[:4])[0] == len(data) - 4
    return decode_response(api_key, version, data[4:])[1]


def handshake(auth: SaslServerAuthenticator, mechanism: str, version: int = 1) -> Step:
    return auth.receive(frame(kp_sasl.SaslHandshakeRequest[version](mechanism=mechanism)))


def authenticate(auth: SaslServerAuthenticator, token: bytes, version: int = 2) -> tuple[Step, Any]:
    step = auth.receive(frame(kp_sasl.SaslAuthenticateRequest[version](auth_bytes=token)))
    return step, answer(step, 36, version) if step.send else None


def scram_evaluator(auth: SaslServerAuthenticator, version: int = 2) -> Callable[[bytes], bytes]:
    def evaluate(token: bytes) -> bytes:
        _, resp = authenticate(auth, token, version)
        assert resp.error_code == 0, resp.error_message
        return bytes(resp.auth_bytes)

    return evaluate


# --- happy paths --------------------------------------------------------------------------------


@pytest.mark.parametrize("client", sorted(PLAIN_CLIENTS))
def test_plain_with_api_versions_first(client: str) -> None:
    auth = new_auth()
    assert auth.max_frame_size == DEFAULT_MAX_RECEIVE_SIZE
    step = auth.receive(frame(kp_metadata.ApiVersionsRequest[3](
        client_software_name="kafka-python", client_software_version="3.0.12")))  # fmt: skip
    versions = answer(step, 18, 3)
    assert versions.error_code == 0 and {k.api_key for k in versions.api_keys} >= {17, 18, 36}
    resp = answer(handshake(auth, "PLAIN"), 17, 1)
    assert (resp.error_code, resp.mechanisms) == (0, ALL)
    step, resp = authenticate(auth, PLAIN_CLIENTS[client]("alice", "alice-secret"))
    assert (resp.error_code, resp.error_message, bytes(resp.auth_bytes)) == (0, None, b"")
    assert resp.session_lifetime_ms == 0
    assert step.authenticated and not step.close and auth.complete
    assert auth.principal == "User:alice" and auth.mechanism == "PLAIN"
    assert auth.max_frame_size is None and not auth.session_expired()


@pytest.mark.parametrize("client", sorted(SCRAM_CLIENTS))
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_without_api_versions(client: str, mechanism: str) -> None:
    auth = new_auth()
    assert answer(handshake(auth, mechanism), 17, 1).error_code == 0
    SCRAM_CLIENTS[client]("bob", "bob-secret", mechanism)(scram_evaluator(auth))
    assert auth.complete and auth.principal == "User:bob"


def test_handshake_v0_then_raw_tokens() -> None:
    auth = new_auth()
    assert answer(handshake(auth, "SCRAM-SHA-256", version=0), 17, 0).error_code == 0

    def evaluate(token: bytes) -> bytes:
        step = auth.receive(token)  # no Kafka header: the token alone
        assert len(step.send) == 1 and not step.close
        size = struct.unpack(">i", step.send[0][:4])[0]
        assert size == len(step.send[0]) - 4
        return step.send[0][4:]

    SCRAM_CLIENTS["kafka-python"]("alice", "alice-secret", "SCRAM-SHA-256")(evaluate)
    assert auth.complete and auth.principal == "User:alice"


def test_handshake_v0_wrong_password_closes_without_answer() -> None:
    auth = new_auth()
    handshake(auth, "PLAIN", version=0)
    step = auth.receive(PLAIN_CLIENTS["kafka-python"]("alice", "nope"))
    assert step.close and step.send == [] and auth.state is SaslState.FAILED


# --- failures: Kafka's answers ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "password", "message"),
    [
        ("alice", "wrong", "Authentication failed: Invalid username or password"),
        ("nobody", "alice-secret", "Authentication failed: Invalid username or password"),
        ("alice", "", "Authentication failed: password not specified"),
        ("", "x", "Authentication failed: username not specified"),
    ],
)
def test_plain_failures_carry_kafkas_message(user: str, password: str, message: str) -> None:
    auth = new_auth()
    handshake(auth, "PLAIN")
    step, resp = authenticate(auth, f"\0{user}\0{password}".encode())
    assert (resp.error_code, resp.error_message) == (58, message)
    assert step.close and step.failed and auth.state is SaslState.FAILED
    assert auth.principal is None


def test_plain_token_count() -> None:
    auth = new_auth()
    handshake(auth, "PLAIN")
    _, resp = authenticate(auth, b"alice\0secret")
    assert resp.error_message == "Invalid SASL/PLAIN response: expected 3 tokens, got 2"


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "x")])
def test_scram_failures_get_the_generic_message(user: str, password: str) -> None:
    """A wrong password and an unknown user look the same to the client."""
    auth = new_auth()
    handshake(auth, "SCRAM-SHA-512")
    failures: list[Any] = []

    def evaluate(token: bytes) -> bytes:
        step, resp = authenticate(auth, token)
        if resp.error_code:
            failures.append((step, resp))
            raise RuntimeError("failed")
        return bytes(resp.auth_bytes)

    with pytest.raises(RuntimeError):
        SCRAM_CLIENTS["scramp"](user, password, "SCRAM-SHA-512")(evaluate)
    [(step, resp)] = failures
    assert resp.error_code == 58 and step.close
    assert resp.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-512"
    )


def test_unsupported_mechanism_lists_the_enabled_ones() -> None:
    auth = new_auth(["SCRAM-SHA-512"])
    step = handshake(auth, "PLAIN")
    resp = answer(step, 17, 1)
    assert (resp.error_code, resp.mechanisms) == (33, ["SCRAM-SHA-512"])
    assert step.close and step.failed == "Unsupported SASL mechanism PLAIN"


@pytest.mark.parametrize("after_handshake", [False, True])
def test_any_other_request_before_authentication_closes(after_handshake: bool) -> None:
    auth = new_auth()
    if after_handshake:
        handshake(auth, "PLAIN")
    metadata = kp_metadata.MetadataRequest[9](
        topics=None, allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
    )  # fmt: skip
    step = auth.receive(frame(metadata))
    assert step.close and step.send == [] and auth.state is SaslState.FAILED
    where = "authentication" if after_handshake else "handshake"
    assert step.failed == f"Unexpected Kafka request of type METADATA during SASL {where}."
    with pytest.raises(RuntimeError):
        auth.receive(frame(metadata))


def test_second_handshake_during_authentication_is_an_illegal_state() -> None:
    auth = new_auth()
    handshake(auth, "PLAIN")
    step = handshake(auth, "PLAIN")
    assert answer(step, 17, 1).error_code == 34 and step.close


def test_second_api_versions_closes() -> None:
    auth = new_auth()
    request = kp_metadata.ApiVersionsRequest[0]()
    assert not auth.receive(frame(request)).close
    assert auth.receive(frame(request)).close


def test_unsupported_api_versions_version_is_answered_and_retried() -> None:
    auth = new_auth()
    too_new = struct.pack(">hhih", 18, 99, 7, 2) + b"kp\x00"  # header v2: tagged fields
    step = auth.receive(too_new)
    assert not step.close and answer(step, 18, 0).error_code == 35
    assert auth.state is SaslState.INITIAL_REQUEST
    assert not auth.receive(frame(kp_metadata.ApiVersionsRequest[3](
        client_software_name="x", client_software_version="1"))).close  # fmt: skip


def test_garbage_first_frame_closes() -> None:
    step = new_auth().receive(struct.pack(">hhi", 17, 1, 1) + b"\xff\xff\xff")
    assert step.close and "GSSAPI is not supported" in (step.failed or "")


def test_frame_too_large_before_authentication() -> None:
    auth = new_auth(max_receive_size=1024)
    assert auth.max_frame_size == 1024
    step = auth.frame_too_large(4096)
    assert step.close and step.send == []
    assert step.failed == "Failing SASL authentication due to invalid receive size (4096 > 1024)"


def test_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match=r"sasl\.enabled\.mechanisms"):
        new_auth(["GSSAPI"])
    with pytest.raises(ValueError):
        new_auth([])


# --- re-authentication (KIP-368) ----------------------------------------------------------------


def _authenticated(
    clock: Clock, mechanism: str = "PLAIN", version: int = 2
) -> SaslServerAuthenticator:
    auth = new_auth(reauth_ms=60_000, clock=clock)
    handshake(auth, mechanism)
    if mechanism == "PLAIN":
        _, resp = authenticate(auth, b"\0alice\0alice-secret", version)
        assert resp.error_code == 0
        if version >= 1:
            assert resp.session_lifetime_ms == 60_000
    else:
        SCRAM_CLIENTS["scramp"]("alice", "alice-secret", mechanism)(scram_evaluator(auth))
    return auth


@pytest.mark.parametrize("mechanism", ALL)
def test_reauthentication_renews_the_session(mechanism: str) -> None:
    clock = Clock()
    auth = _authenticated(clock, mechanism)
    assert auth.session_expires == 1060.0
    clock.now = 1059.0
    assert not auth.session_expired()
    step = auth.begin_reauthentication(frame(kp_sasl.SaslHandshakeRequest[1](mechanism=mechanism)))
    assert step is not None and answer(step, 17, 1).error_code == 0 and auth.authenticating
    if mechanism == "PLAIN":
        step, resp = authenticate(auth, b"\0alice\0alice-secret")
        assert resp.session_lifetime_ms == 60_000 and step.authenticated
    else:
        SCRAM_CLIENTS["kafka-python"]("alice", "alice-secret", mechanism)(scram_evaluator(auth))
    assert auth.complete and auth.session_expires == 1119.0
    clock.now = 1119.5
    assert auth.session_expired()


def test_reauthentication_cannot_change_principal() -> None:
    clock = Clock()
    auth = _authenticated(clock)
    auth.begin_reauthentication(frame(kp_sasl.SaslHandshakeRequest[1](mechanism="PLAIN")))
    step, resp = authenticate(auth, b"\0bob\0bob-secret")
    assert resp.error_code == 58 and step.close
    assert resp.error_message == (
        "Cannot change principals during re-authentication from User.alice: User.bob"
    )


def test_reauthentication_cannot_change_mechanism() -> None:
    clock = Clock()
    auth = _authenticated(clock)
    step = auth.begin_reauthentication(
        frame(kp_sasl.SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"))
    )
    assert step is not None and not step.close  # Kafka answers the handshake...
    step, resp = authenticate(auth, b"n,,n=alice,r=abc")
    assert step.close and resp is None  # ...and closes at the next token
    assert "not supported for re-authentication of mechanism 'PLAIN'" in (step.failed or "")


def test_reauthentication_off_or_too_soon_goes_to_the_handlers() -> None:
    no_reauth = new_auth()
    handshake(no_reauth, "PLAIN")
    authenticate(no_reauth, b"\0alice\0alice-secret")
    hs = frame(kp_sasl.SaslHandshakeRequest[1](mechanism="PLAIN"))
    assert no_reauth.begin_reauthentication(hs) is None
    clock = Clock()
    auth = _authenticated(clock)
    assert auth.begin_reauthentication(hs) is not None
    authenticate(auth, b"\0alice\0alice-secret")
    clock.now += 0.5
    assert auth.begin_reauthentication(hs) is None  # at most one per second
    clock.now += 0.6
    assert auth.begin_reauthentication(hs) is not None


def test_v0_authenticate_client_gets_no_lifetime_but_expires() -> None:
    clock = Clock()
    auth = _authenticated(clock, version=0)
    clock.now += 61
    assert auth.session_expired()


# --- fuzz ---------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(st.binary(max_size=64), min_size=1, max_size=6), mechanism=st.sampled_from(ALL)
)
def test_fuzzed_frames_never_authenticate_or_crash(frames: list[bytes], mechanism: str) -> None:
    """Random frames, after a real handshake or not: every step is an answer or a close, and
    nothing random authenticates."""
    for with_handshake in (False, True):
        auth = new_auth()
        if with_handshake:
            handshake(auth, mechanism)
        for data in frames:
            if not auth.authenticating:
                break
            step = auth.receive(data)
            assert not step.authenticated and not auth.complete
            for out in step.send:
                assert struct.unpack(">i", out[:4])[0] == len(out) - 4


@settings(max_examples=400, deadline=None)
@given(
    api_key=st.sampled_from(sorted(m.APIS)),
    version=st.integers(0, 15),
    body=st.binary(max_size=48),
    after_handshake=st.booleans(),
)
def test_no_request_is_served_before_authentication(
    api_key: int, version: int, body: bytes, after_handshake: bool
) -> None:
    """A well-framed request of any API with any version and body: only ApiVersions (first) and
    SaslHandshake are ever answered before authentication; everything else closes unanswered
    (SaslAuthenticate before the handshake, too)."""
    auth = new_auth()
    if after_handshake:
        handshake(auth, "SCRAM-SHA-512")
    frame = struct.pack(">hhih", api_key, version, 1, 2) + b"fz" + b"\x00" + body
    step = auth.receive(frame)
    assert not auth.complete and not step.authenticated
    if step.send:
        answered = api_key in (m.ApiVersions.key, m.SaslHandshake.key)
        answered |= after_handshake and api_key == m.SaslAuthenticate.key
        assert answered, (api_key, version)
    elif not after_handshake or api_key != m.SaslAuthenticate.key:
        assert step.close
