"""The security error codes against kafka-python's table: same code, same name."""

from __future__ import annotations

import kafka.errors

from sluice.protocol import errors
from sluice.protocol.errors import error_name, for_code

SECURITY_CODES = {
    29: "TOPIC_AUTHORIZATION_FAILED",
    30: "GROUP_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
    33: "UNSUPPORTED_SASL_MECHANISM",
    34: "ILLEGAL_SASL_STATE",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    54: "SECURITY_DISABLED",
    58: "SASL_AUTHENTICATION_FAILED",
    91: "RESOURCE_NOT_FOUND",
    92: "DUPLICATE_RESOURCE",
    93: "UNACCEPTABLE_CREDENTIAL",
}


def test_security_codes_are_registered_under_kafkas_names() -> None:
    theirs = {cls.errno: cls.__name__ for cls in kafka.errors.kafka_errors.values()}
    for code, name in SECURITY_CODES.items():
        assert error_name(code) == name
        assert theirs[code] == for_code(code).__name__ + "Error"
        assert not for_code(code).retriable
    assert errors.SaslAuthenticationFailed.code == 58
