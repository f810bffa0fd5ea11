"""SCRAM credentials in Kafka's text and the server exchange against RFC 7677's vector and the
SCRAM clients of kafka-python, aiokafka and scramp."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.server.security.errors import AuthenticationFailed, InvalidCredential
from sluice.server.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramServerExchange,
    check_iterations,
    credential_from_password,
    credential_from_salted_password,
    mechanism_name,
    mechanism_type,
    salted_password,
    verify_password,
)

from .clients import SCRAM_CLIENTS

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]

# RFC 7677 section 3 (SCRAM-SHA-256, user "user", password "pencil").
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc_7677_vector_byte_for_byte() -> None:
    cred = credential_from_password("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)
    exchange = ScramServerExchange("SCRAM-SHA-256", {"user": cred}.get, nonce=RFC_SERVER_NONCE)
    assert exchange.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not exchange.complete
    assert exchange.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert exchange.complete and exchange.username == "user"
    with pytest.raises(AuthenticationFailed, match="Unexpected challenge"):
        exchange.evaluate(RFC_CLIENT_FINAL)


def test_credential_text_is_kafkas() -> None:
    cred = credential_from_password("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)
    text = cred.to_text()
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=")
    assert text.endswith(",iterations=4096")
    assert text.split(",")[1:3] == [
        "stored_key=" + base64.b64encode(cred.stored_key).decode(),
        "server_key=" + base64.b64encode(cred.server_key).decode(),
    ]
    assert ScramCredential.from_text(text) == cred


@given(
    salt=st.binary(min_size=1, max_size=64),
    stored=st.binary(min_size=1, max_size=64),
    server=st.binary(min_size=1, max_size=64),
    iterations=st.integers(0, 2**31 - 1),
)
def test_credential_text_round_trips(
    salt: bytes, stored: bytes, server: bytes, iterations: int
) -> None:
    cred = ScramCredential(salt, stored, server, iterations)
    assert ScramCredential.from_text(cred.to_text()) == cred


@pytest.mark.parametrize(
    "text",
    [
        "",
        "salt=AA==,stored_key=AA==,server_key=AA==",
        "salt=AA==,stored_key=AA==,server_key=AA==,iterations=4096,extra=1",
        "salt=AA==,stored_key=AA==,server_key=AA==,iterations=many",
        "salt=!!,stored_key=AA==,server_key=AA==,iterations=4096",
        "salt,stored_key=AA==,server_key=AA==,iterations=4096",
    ],
)
def test_invalid_credential_text_is_refused(text: str) -> None:
    with pytest.raises(InvalidCredential, match="Credentials not valid"):
        ScramCredential.from_text(text)


def test_iteration_bounds() -> None:
    check_iterations(MIN_ITERATIONS)
    check_iterations(MAX_ITERATIONS)
    with pytest.raises(InvalidCredential, match="Too few iterations"):
        check_iterations(MIN_ITERATIONS - 1)
    with pytest.raises(InvalidCredential, match="Too many iterations"):
        check_iterations(MAX_ITERATIONS + 1)
    with pytest.raises(InvalidCredential):
        credential_from_password("SCRAM-SHA-512", "x", iterations=1000)
    with pytest.raises(InvalidCredential, match="unknown SCRAM mechanism"):
        credential_from_password("SCRAM-SHA-1", "x")


def test_mechanism_types_are_kafkas() -> None:
    assert [mechanism_name(t) for t in (0, 1, 2, 3)] == [
        None,
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
        None,
    ]
    assert mechanism_type("SCRAM-SHA-512") == 2 and mechanism_type("PLAIN") == 0


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_salted_password_upsertion_equals_password_credential(mechanism: str) -> None:
    """KIP-554: the client sends the salted password; the broker's keys equal those made from
    the password."""
    salt = b"0123456789abcdef"
    from_password = credential_from_password(mechanism, "s3cret", 8192, salt)
    salted = salted_password(mechanism, "s3cret", salt, 8192)
    assert credential_from_salted_password(mechanism, salt, salted, 8192) == from_password
    assert verify_password(mechanism, from_password, "s3cret")
    assert not verify_password(mechanism, from_password, "s3cret ")


@pytest.mark.parametrize("client", sorted(SCRAM_CLIENTS))
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user", ["alice", "a,b=c", "zoë"])
def test_real_clients_authenticate(client: str, mechanism: str, user: str) -> None:
    cred = credential_from_password(mechanism, "pässword")
    exchange = ScramServerExchange(mechanism, {user: cred}.get)
    if client == "kafka-python" and "," in user:
        # kafka-python does not escape "," as "=2C" (RFC 5802 5.1): Kafka refuses it too.
        with pytest.raises(AuthenticationFailed, match="client first message format"):
            SCRAM_CLIENTS[client](user, "pässword", mechanism)(exchange.evaluate)
        return
    SCRAM_CLIENTS[client](user, "pässword", mechanism)(exchange.evaluate)
    assert exchange.complete and exchange.username == user


@pytest.mark.parametrize("client", sorted(SCRAM_CLIENTS))
def test_wrong_password_fails_with_the_generic_answer(client: str) -> None:
    cred = credential_from_password("SCRAM-SHA-512", "right")
    exchange = ScramServerExchange("SCRAM-SHA-512", {"alice": cred}.get)
    with pytest.raises(AuthenticationFailed, match="Invalid client credentials") as info:
        SCRAM_CLIENTS[client]("alice", "wrong", "SCRAM-SHA-512")(exchange.evaluate)
    assert info.value.client_message is None  # the client learns nothing specific
    assert not exchange.complete


def test_unknown_user_fails_at_the_first_message() -> None:
    exchange = ScramServerExchange("SCRAM-SHA-256", {}.get)
    with pytest.raises(AuthenticationFailed, match="Invalid user credentials") as info:
        exchange.evaluate(RFC_CLIENT_FIRST)
    assert info.value.client_message is None
    with pytest.raises(AuthenticationFailed):
        exchange.evaluate(RFC_CLIENT_FINAL)


def test_credential_below_minimum_iterations_is_refused() -> None:
    weak = ScramCredential(RFC_SALT, b"k" * 32, b"k" * 32, 1024)
    exchange = ScramServerExchange("SCRAM-SHA-256", {"user": weak}.get)
    with pytest.raises(AuthenticationFailed, match="Iterations 1024 is less than the minimum"):
        exchange.evaluate(RFC_CLIENT_FIRST)


def test_store_failure_is_an_authentication_failure() -> None:
    def broken(user: str) -> ScramCredential | None:
        raise OSError("store down")

    exchange = ScramServerExchange("SCRAM-SHA-256", broken)
    with pytest.raises(AuthenticationFailed, match="Credentials could not be obtained"):
        exchange.evaluate(RFC_CLIENT_FIRST)


def test_other_authorization_id_is_refused_with_kafkas_message() -> None:
    cred = credential_from_password("SCRAM-SHA-256", "pencil")
    exchange = ScramServerExchange("SCRAM-SHA-256", {"user": cred}.get)
    with pytest.raises(AuthenticationFailed) as info:
        exchange.evaluate(b"n,a=admin,n=user,r=abcdef")
    assert info.value.client_message == (
        "Authentication failed: Client requested an authorization id that is different from "
        "username"
    )


@pytest.mark.parametrize(
    "token", [b"", b"\xff\xfe", b"garbage", b"n,,", b"n,,r=x", b"p=tls-unique,,n=user,r=abc"]
)
def test_garbage_first_messages_fail_cleanly(token: bytes) -> None:
    exchange = ScramServerExchange("SCRAM-SHA-256", {}.get)
    with pytest.raises(AuthenticationFailed):
        exchange.evaluate(token)
    assert not exchange.complete


@given(token=st.binary(max_size=200))
def test_any_final_message_fails_cleanly_or_authenticates(token: bytes) -> None:
    cred = credential_from_password("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)
    exchange = ScramServerExchange("SCRAM-SHA-256", {"user": cred}.get, nonce=RFC_SERVER_NONCE)
    exchange.evaluate(RFC_CLIENT_FIRST)
    try:
        exchange.evaluate(token)
    except AuthenticationFailed:
        assert not exchange.complete
    else:
        assert token == RFC_CLIENT_FINAL


def _librdkafka_2_0_final(
    mechanism: str, password: str, cred: ScramCredential, client_first: bytes, server_first: bytes
) -> bytes:
    """The client-final message librdkafka 2.0.x sends: its nonce followed by the server's
    whole nonce (client nonce included again), with the proof over that message."""
    import hashlib
    import hmac

    digest = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}[mechanism]
    client_nonce = client_first.decode().rsplit("r=", 1)[1]
    combined = server_first.decode().split(",")[0][2:]
    without_proof = f"c=biws,r={client_nonce}{combined}"
    auth = f"{client_first.decode()[3:]},{server_first.decode()},{without_proof}".encode()
    salted = salted_password(mechanism, password, cred.salt, cred.iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    signature = hmac.new(digest(client_key).digest(), auth, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_final_nonce_ending_with_the_servers_is_accepted_as_kafka_does(mechanism: str) -> None:
    """Kafka checks ``nonce.endsWith(serverNonce)``; librdkafka 2.0.x (kcat 1.7.1) needs it."""
    cred = credential_from_password(mechanism, "alice-pw")
    first = b"n,,n=alice,r=Y[uJb>rNF@w]]xb9:``@P]9Cm@R;10]2"
    for password, accepted in (("alice-pw", True), ("wrong", False)):
        exchange = ScramServerExchange(mechanism, {"alice": cred}.get)
        server_first = exchange.evaluate(first)
        final = _librdkafka_2_0_final(mechanism, password, cred, first, server_first)
        if accepted:
            assert exchange.evaluate(final).startswith(b"v=")
            assert exchange.complete and exchange.username == "alice"
        else:
            with pytest.raises(AuthenticationFailed, match="Invalid client"):
                exchange.evaluate(final)
            assert not exchange.complete
