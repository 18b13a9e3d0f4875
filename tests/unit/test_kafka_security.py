"""The [kafka] security settings map onto both client libraries from one table."""

from __future__ import annotations

from pathlib import Path

from monitor.config import KafkaSettings
from monitor.ingest.security import kafka_python_security, librdkafka_security


def test_sasl_ssl_maps_onto_each_library(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    k = KafkaSettings(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="monitor",
        sasl_password_file=secret,
        ssl_cafile=tmp_path / "ca.pem",
        ssl_password="keypw",
        ssl_check_hostname=False,
    )
    assert kafka_python_security(k) == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "monitor",
        "sasl_plain_password": "s3cret",
        "ssl_cafile": str(tmp_path / "ca.pem"),
        "ssl_password": "keypw",
        "ssl_check_hostname": False,
    }
    assert librdkafka_security(k) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "monitor",
        "sasl.password": "s3cret",
        "ssl.ca.location": str(tmp_path / "ca.pem"),
        "ssl.key.password": "keypw",
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_plaintext_sets_only_the_protocol() -> None:
    k = KafkaSettings()
    assert kafka_python_security(k) == {"security_protocol": "PLAINTEXT"}
    assert librdkafka_security(k) == {"security.protocol": "PLAINTEXT"}
    tls = KafkaSettings(security_protocol="SSL", ssl_certfile=Path("/c.pem"))
    assert librdkafka_security(tls)["ssl.endpoint.identification.algorithm"] == "https"
    assert kafka_python_security(tls)["ssl_certfile"] == "/c.pem"
