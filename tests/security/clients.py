"""SASL client sides nobody here wrote, as generators of tokens: kafka-python's and aiokafka's
SCRAM and PLAIN message builders, and scramp's client."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable

import scramp
from aiokafka.conn import SaslPlainAuthenticator, ScramAuthenticator

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.net.sasl.plain import SaslMechanismPlain
    from kafka.net.sasl.scram import ScramClient

#: ``exchange(server_evaluate) -> None``: runs a whole client side against a server callback
#: (``bytes -> bytes``), raising if the client rejects the server's answers.
Exchange = Callable[[Callable[[bytes], bytes]], None]


def kafka_python_scram(user: str, password: str, mechanism: str) -> Exchange:
    def run(evaluate: Callable[[bytes], bytes]) -> None:
        client = ScramClient(user, password, mechanism)
        client.process_server_first_message(evaluate(client.first_message()))
        client.process_server_final_message(evaluate(client.final_message()))

    return run


def aiokafka_scram(user: str, password: str, mechanism: str) -> Exchange:
    def run(evaluate: Callable[[bytes], bytes]) -> None:
        auth = ScramAuthenticator(
            loop=asyncio.new_event_loop(),
            sasl_plain_password=password,
            sasl_plain_username=user,
            sasl_mechanism=mechanism,
        )
        try:
            step = auth._step(None)
            while step is not None:
                token, _expects_answer = step
                step = auth._step(evaluate(token))
        finally:
            auth._loop.close()

    return run


def scramp_scram(user: str, password: str, mechanism: str) -> Exchange:
    def run(evaluate: Callable[[bytes], bytes]) -> None:
        client = scramp.ScramClient([mechanism], user, password)
        server_first = evaluate(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        client.set_server_final(evaluate(client.get_client_final().encode()).decode())

    return run


SCRAM_CLIENTS = {
    "kafka-python": kafka_python_scram,
    "aiokafka": aiokafka_scram,
    "scramp": scramp_scram,
}


def kafka_python_plain(user: str, password: str) -> bytes:
    return SaslMechanismPlain(
        sasl_plain_username=user, sasl_plain_password=password, security_protocol="SASL_SSL"
    ).auth_bytes()


def aiokafka_plain(user: str, password: str) -> bytes:
    auth = SaslPlainAuthenticator(loop=None, sasl_plain_username=user, sasl_plain_password=password)
    token, _ = auth._step(None)
    return bytes(token)


PLAIN_CLIENTS = {"kafka-python": kafka_python_plain, "aiokafka": aiokafka_plain}
