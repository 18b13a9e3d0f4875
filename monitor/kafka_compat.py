"""Work around a thread race in kafka-python 3's lazily compiled protocol decoders.

kafka-python 3 compiles a decoder per (message, version) on first use. For the top-level
response class it briefly swaps ``StructField._data_class`` from a weak proxy to the real
class and swaps it back afterwards, with no lock. When two threads decode the same response
type for the first time at once (the consumer, the dead-letter producer and the admin
client each run their own network thread), one of them can compile while the other has
already restored the proxy. The decoder it caches then calls ``object.__new__`` on the
proxy and fails for every later response of that type: the client can never bootstrap
again ("object.__new__(X): X is not a type object (weakref.CallableProxyType)").
tests/unit/test_kafka_compat.py reproduces the race and shows the lock prevents it.

``install()`` serialises compilation with one lock. The compiled functions are cached, so
the lock is taken once per (message, version, flags) and costs nothing in steady state.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["install"]

_LOCK = threading.Lock()
_MARK = "_mlmon_serialised"


def install() -> bool:
    """Serialise kafka-python's decoder compilation; idempotent.

    Returns False when the installed kafka-python has no lazily compiled decoders (an
    older or a fixed release), so there is nothing to guard.
    """
    try:
        from kafka.protocol.schemas.fields.struct import StructField
    except ImportError:
        return False
    compile_decoder = getattr(StructField, "compiled_decode_from", None)
    if compile_decoder is None:
        return False
    if getattr(compile_decoder, _MARK, False):
        return True
    StructField.compiled_decode_from = _serialised(compile_decoder)  # type: ignore[method-assign]
    return True


def _serialised(compile_decoder: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(compile_decoder)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return compile_decoder(self, *args, **kwargs)

    setattr(guarded, _MARK, True)
    return guarded
