"""What ``monitor.redact.mask`` hides: credentials inside URLs (user-info and
secret-named query parameters) and registered secret values; what it keeps."""

from __future__ import annotations

import pytest

from monitor.redact import mask, mask_urls, register_secrets


@pytest.mark.parametrize(
    ("text", "hidden", "kept"),
    [
        ("POST http://user:pw-123@am:9093/api/v2/alerts failed", "pw-123", "http://***@am:9093"),
        ("https://hooks.example/x?token=abc123&team=ml", "abc123", "?token=***&team=ml"),
        ("url=https://h/x?a=1&api_key=k-99#frag", "k-99", "&api_key=***#frag"),
        ("https://h/x?access_token=zz1&sig=qq2", "zz1", "access_token=***&sig=***"),
        ("<urlopen https://h/p?password=hunter22>", "hunter22", "?password=***>"),
    ],
)
def test_credentials_in_urls_are_masked(text: str, hidden: str, kept: str) -> None:
    out = mask_urls(text)
    assert hidden not in out and kept in out, out


def test_plain_text_and_harmless_queries_are_untouched() -> None:
    text = "http://127.0.0.1:9108/api/v1/history?model=fraud&metric=accuracy&window=1h"
    assert mask_urls(text) == text


def test_registered_values_are_masked_anywhere() -> None:
    register_secrets(["wh-s3cret-0042", "x"])  # too short to register: "x"
    out = mask("signature key wh-s3cret-0042 rejected; x marks the spot")
    assert "wh-s3cret-0042" not in out and "x marks" in out
