"""Secrets masked wherever text leaves the process: log lines, API answers, the status
page, reports.

Two kinds of secret are recognised: credentials inside URLs — user-info
(``https://user:pass@host`` -> ``https://***@host``) and query parameters whose name
says secret (``?token=…``, ``&api_key=…``, ``&password=…`` -> ``=***``) — and the exact
secret values of the configuration (passwords, webhook secrets, secret-like consumer
settings), registered once at start by the command line.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

__all__ = ["URL_USERINFO", "mask", "mask_urls", "register_secrets"]

URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
# a query (or matrix) parameter whose name holds a secret-like word, up to the next
# separator; the name is kept so the reader knows what was there
_QUERY_SECRET = re.compile(
    r"(?i)([?&;][\w.\-]*(?:token|secret|passw|pwd|api[_-]?key|apikey|signature|sig|auth|"
    r"credential|session|key)[\w.\-]*=)[^&#;\s\"'<>]+"
)
_secrets: set[str] = set()
_lock = threading.Lock()


def register_secrets(values: Iterable[object]) -> None:
    """Mask these exact values in everything ``mask`` sees from now on (values shorter
    than 4 characters would mask noise)."""
    with _lock:
        for v in values:
            if isinstance(v, str) and len(v.strip()) >= 4:
                _secrets.add(v.strip())


def mask_urls(text: str) -> str:
    """Credentials inside URLs: user-info and secret-named query parameters."""
    return _QUERY_SECRET.sub(r"\1***", URL_USERINFO.sub(r"\1***@", text))


def mask(text: str) -> str:
    """``mask_urls`` and every registered secret value."""
    text = mask_urls(text)
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for s in secrets:
        if s in text:
            text = text.replace(s, "***")
    return text
