"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka stores and checks it.

**Credentials.** Kafka keeps, per user and mechanism, the salt, the stored key, the server key
and the iteration count -- never the password -- as the text of ``ScramCredentialUtils``::

    salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>

(standard base64 with padding). ``SaltedPassword = PBKDF2-HMAC(password, salt, i)``,
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))``, ``ServerKey = HMAC(SaltedPassword,
"Server Key")``. The password is the UTF-8 of the text with no SASLprep, as Kafka's
``ScramFormatter`` and the clients (librdkafka, kafka-python, the Java client) derive it, so a
credential made here and one made by ``kafka-configs`` verify the same client. KIP-554's
AlterUserScramCredentials sends the salted password itself: :func:`credential_from_salted_password`.

Iterations: at least 4096 for both mechanisms (``ScramMechanism.minIterations``), and an
AlterUserScramCredentials upsertion at most 16384 (``ZkAdminManager``'s ``maxIterations``).

**The exchange.** :class:`ScramServerExchange` is the server side of one authentication, driven
by bytes (sans-I/O): ``evaluate(client-first) -> server-first``, ``evaluate(client-final) ->
server-final``. Message parsing, nonces and the proof check are ``scramp``'s (except a final
nonce that merely ends with the server's, which Kafka accepts and librdkafka 2.0.x sends:
checked like Kafka's ``verifyClientProof``); what is Kafka's is
around it: the credential lookup, the checks ``ScramSaslServer`` adds (an authorization id must
equal the user name, the credential's iterations are at least the mechanism's minimum) and which
failures reveal their reason to the client (:mod:`sluice.server.security.errors`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import AuthenticationFailed, InvalidCredential

# ``scramp`` (and the asn1crypto it pulls in, ~16 ms) is imported by the first SCRAM exchange, so
# a broker whose clients never log in with SCRAM does not load it.

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MECHANISM_TYPES",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISMS",
    "ScramCredential",
    "ScramServerExchange",
    "credential_from_password",
    "credential_from_salted_password",
    "mechanism_name",
    "mechanism_type",
    "salted_password",
]

#: The hash of each SCRAM mechanism Kafka supports.
SCRAM_MECHANISMS: dict[str, Callable[..., hashlib._Hash]] = {
    "SCRAM-SHA-256": hashlib.sha256,
    "SCRAM-SHA-512": hashlib.sha512,
}
#: ``org.apache.kafka.clients.admin.ScramMechanism``: the int8 of APIs 50 and 51 (0 = UNKNOWN).
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: ``kafka-configs --add-config 'SCRAM-SHA-512=[password=...]'`` without ``iterations=``.
DEFAULT_ITERATIONS = 4096
_SALT_BYTES = 32  # Kafka's ScramFormatter.secureRandomBytes: a 32-byte salt


def mechanism_name(mechanism_type_: int) -> str | None:
    """The mechanism of an API 50/51 int8, ``None`` for UNKNOWN or anything else."""
    return MECHANISM_TYPES.get(mechanism_type_)


def mechanism_type(name: str) -> int:
    """The API 50/51 int8 of a mechanism name (0, UNKNOWN, for anything else)."""
    for code, known in MECHANISM_TYPES.items():
        if known == name:
            return code
    return 0


def _hash(mechanism: str) -> Callable[..., hashlib._Hash]:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        raise InvalidCredential(f"unknown SCRAM mechanism {mechanism!r}") from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """One user's credential for one mechanism (Kafka's ``ScramCredential``)."""

    salt: bytes
    #: Not in the repr: with the server key, what impersonates the broker to its clients.
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def to_text(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """Kafka's ``credentialFromString``: exactly the four keys, else ``InvalidCredential``."""
        props: dict[str, str] = {}
        for token in text.split(","):
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise InvalidCredential(f"Credentials not valid: {text}")
            props[key] = value
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise InvalidCredential(f"Credentials not valid: {text}")
        try:
            return cls(
                base64.b64decode(props["salt"], validate=True),
                base64.b64decode(props["stored_key"], validate=True),
                base64.b64decode(props["server_key"], validate=True),
                int(props["iterations"]),
            )
        except (binascii.Error, ValueError) as exc:
            raise InvalidCredential(f"Credentials not valid: {text}") from exc


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, i)`` of RFC 5802 over the password's UTF-8 (no SASLprep, as Kafka)."""
    name = _hash(mechanism)().name
    return hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored and server keys of a salted password (``ScramFormatter.generateCredential``;
    what the broker does with a KIP-554 upsertion)."""
    hf = _hash(mechanism)
    client_key = hmac.new(salted, b"Client Key", hf).digest()
    server_key = hmac.new(salted, b"Server Key", hf).digest()
    return ScramCredential(salt, hf(client_key).digest(), server_key, iterations)


def check_iterations(iterations: int, maximum: int | None = MAX_ITERATIONS) -> None:
    """KIP-554's bounds (``Too few iterations`` / ``Too many iterations`` in Kafka's answer)."""
    if iterations < MIN_ITERATIONS:
        raise InvalidCredential("Too few iterations")
    if maximum is not None and iterations > maximum:
        raise InvalidCredential("Too many iterations")


def credential_from_password(
    mechanism: str,
    password: str,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for ``password`` (a random 32-byte salt unless given)."""
    check_iterations(iterations, maximum=None)  # kafka-configs accepts more than KIP-554
    if salt is None:
        salt = os.urandom(_SALT_BYTES)
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` derives ``credential``'s stored key (PLAIN against the SCRAM store,
    as Redpanda does). Costs one PBKDF2 of ``credential.iterations``."""
    derived = credential_from_salted_password(
        mechanism,
        credential.salt,
        salted_password(mechanism, password, credential.salt, credential.iterations),
        credential.iterations,
    )
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


#: Looks a user up: the credential for the exchange's mechanism, or ``None`` (unknown user).
CredentialLookup = Callable[[str], ScramCredential | None]


class ScramServerExchange:
    """The server side of one SCRAM authentication (Kafka's ``ScramSaslServer``).

    ``evaluate`` takes each client message and returns the server's; ``complete`` and
    ``username`` tell the outcome. Any failure raises :class:`AuthenticationFailed` and leaves
    the exchange failed (every later call raises too). ``nonce`` fixes the server nonce (tests).
    """

    def __init__(self, mechanism: str, lookup: CredentialLookup, nonce: str | None = None) -> None:
        _hash(mechanism)
        self.mechanism = mechanism
        self.username: str | None = None
        self.complete = False
        self._lookup = lookup
        import scramp

        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info, s_nonce=nonce)
        self._step = 0  # 0: client-first expected, 1: client-final expected, 2: done, -1: failed
        self._lookup_error: AuthenticationFailed | None = None
        self._client_first = ""
        self._server_first = ""
        self._credential: ScramCredential | None = None

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int] | None:
        self.username = username
        try:
            credential = self._lookup(username)
        except Exception as exc:  # a store failure: Kafka's "Credentials could not be obtained"
            self._lookup_error = AuthenticationFailed(
                f"Authentication failed: Credentials could not be obtained ({exc!r})"
            )
            raise
        if credential is None:
            self._lookup_error = AuthenticationFailed(
                "Authentication failed: Invalid user credentials"
            )
            return None
        if credential.iterations < MIN_ITERATIONS:
            self._lookup_error = AuthenticationFailed(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism}"
            )
            return None
        self._credential = credential
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def evaluate(self, token: bytes) -> bytes:
        """One client message in, the server's answer out."""
        import scramp

        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            self._step = -1
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8") from None
        answer: str
        if self._step == 0:
            self._check_authzid(text)
            try:
                self._server.set_client_first(text)
                answer = self._server.get_server_first()
            except scramp.ScramException as exc:
                self._step = -1
                if self._lookup_error is not None:
                    raise self._lookup_error from exc
                raise AuthenticationFailed(
                    f"Invalid SCRAM client first message format: {exc}"
                ) from exc
            self._step = 1
            self._client_first, self._server_first = text, answer
            return answer.encode("utf-8")
        if self._step == 1:
            try:
                lenient = self._lenient_final(text)
                if lenient is not None:
                    answer = lenient
                else:
                    self._server.set_client_final(text)
                    answer = self._server.get_server_final()
            except scramp.ScramException as exc:
                self._step = -1
                raise AuthenticationFailed(f"Invalid client credentials: {exc}") from exc
            self._step = 2
            self.complete = True
            return answer.encode("utf-8")
        self._step = -1
        raise AuthenticationFailed(
            "Unexpected challenge in Sasl server state "
            + ("COMPLETE" if self.complete else "FAILED")
        )

    def _lenient_final(self, client_final: str) -> str | None:
        """Kafka's check of the final nonce is ``endsWith`` the server's, not equality (RFC
        5802), and librdkafka 2.0.x relies on it: it sends the client nonce followed by the
        whole server nonce. scramp refuses that, so such a message is verified here the way
        Kafka's ``ScramSaslServer.verifyClientProof`` does (the proof covers the message as
        sent); None for any other message (scramp's path). Raises ``scramp.ScramException``
        when the proof is wrong."""
        import scramp

        fields = dict(f.split("=", 1) for f in client_final.split(",") if "=" in f)
        combined = dict(f.split("=", 1) for f in self._server_first.split(",") if "=" in f)["r"]
        nonce = fields.get("r", "")
        if nonce == combined or not nonce.endswith(combined) or "p" not in fields:
            return None
        credential = self._credential
        gs2_header, _, client_first_bare = self._client_first.partition(",")
        authzid, _, client_first_bare = client_first_bare.partition(",")
        gs2 = f"{gs2_header},{authzid},".encode()
        if credential is None or base64.b64decode(fields.get("c", "")) != gs2:
            raise scramp.ScramException("Invalid client final message")
        without_proof = client_final[: client_final.rindex(",p=")]
        auth_message = f"{client_first_bare},{self._server_first},{without_proof}".encode()
        digest = _hash(self.mechanism)
        signature = hmac.new(credential.stored_key, auth_message, digest).digest()
        try:
            proof = base64.b64decode(fields["p"], validate=True)
        except binascii.Error:
            raise scramp.ScramException("Invalid client proof") from None
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        if len(proof) != len(signature) or not hmac.compare_digest(
            digest(client_key).digest(), credential.stored_key
        ):
            raise scramp.ScramException("Invalid client proof")
        server_signature = hmac.new(credential.server_key, auth_message, digest).digest()
        return "v=" + base64.b64encode(server_signature).decode()

    def _check_authzid(self, client_first: str) -> None:
        """Kafka accepts an authorization id equal to the user name and refuses another one
        with a message for the client. (scramp refuses any authorization id, so an equal one
        fails with the generic answer: no Kafka client sends one.)"""
        header = client_first.split(",", 2)
        if len(header) < 3 or not header[1].startswith("a="):
            return
        bare = dict(part.split("=", 1) for part in header[2].split(",") if "=" in part)
        user = bare.get("n", "").replace("=2C", ",").replace("=3D", "=")
        if header[1][2:].replace("=2C", ",").replace("=3D", "=") != user:
            self._step = -1
            message = (
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
            raise AuthenticationFailed(message, client_message=message)
