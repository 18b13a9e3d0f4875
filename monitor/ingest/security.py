"""The ``[kafka]`` security settings, mapped once onto both client libraries' names.

One row per setting that is set: kafka-python's argument and value, librdkafka's
property and value (docs/kafka.md, "Settings mapping", is the same table). Secrets are
resolved here, when a client is built, and never logged.
"""

from __future__ import annotations

from typing import Any

from ..config import KafkaSettings

__all__ = ["kafka_python_security", "librdkafka_security"]


def _rows(k: KafkaSettings) -> list[tuple[str, Any, str, Any]]:
    rows: list[tuple[str, Any, str, Any]] = [
        ("security_protocol", k.security_protocol, "security.protocol", k.security_protocol)
    ]
    if k.sasl_mechanism:
        rows.append(("sasl_mechanism", k.sasl_mechanism, "sasl.mechanism", k.sasl_mechanism))
        if k.sasl_username is not None:
            rows.append(("sasl_plain_username", k.sasl_username, "sasl.username", k.sasl_username))
        password = k.resolved_sasl_password()
        if password is not None:
            rows.append(("sasl_plain_password", password, "sasl.password", password))
    for attr, name, prop in (
        ("ssl_cafile", "ssl_cafile", "ssl.ca.location"),
        ("ssl_certfile", "ssl_certfile", "ssl.certificate.location"),
        ("ssl_keyfile", "ssl_keyfile", "ssl.key.location"),
    ):
        path = getattr(k, attr)
        if path:
            rows.append((name, str(path), prop, str(path)))
    if k.ssl_password is not None:
        secret = k.ssl_password.get_secret_value()
        rows.append(("ssl_password", secret, "ssl.key.password", secret))
    if k.security_protocol in ("SSL", "SASL_SSL"):
        check = k.ssl_check_hostname
        rows.append(
            (
                "ssl_check_hostname",
                check,
                "ssl.endpoint.identification.algorithm",
                "https" if check else "none",
            )
        )
    return rows


def kafka_python_security(k: KafkaSettings) -> dict[str, Any]:
    """The security settings as kafka-python keyword arguments."""
    return {name: value for name, value, _, _ in _rows(k)}


def librdkafka_security(k: KafkaSettings) -> dict[str, Any]:
    """The security settings as librdkafka properties (confluent-kafka)."""
    return {prop: value for _, _, prop, value in _rows(k)}
