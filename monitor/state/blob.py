"""The one reader of stored state: JSON metadata plus plain numpy arrays in a ``.npz``.

Checkpoint files, the partition states of ``<group>-state`` and the statistics of
``<group>-stats`` are all this format, and all of them are untrusted input: a file can
be hand-edited or corrupt, and anyone who can write to a topic can put any bytes in
it. So every byte read from any of them goes through ``read_blob``, which refuses,
before anything large is allocated or parsed:

- a blob over ``max_bytes``, more than ``MAX_MEMBERS`` arrays, a member that is not an
  ``.npy``;
- any *compressed* member (``np.savez`` stores plainly, so a compressed member can only
  be a crafted one — and a 780 KB zip bomb inflates to gigabytes);
- an array whose declared shape × itemsize is not exactly the bytes it holds, or whose
  dtype is not plain numbers (no objects, no pickle, no structured or Fortran arrays);
- a header over ``MAX_HEADER_BYTES`` or nested deeper than ``MAX_HEADER_DEPTH`` (counted
  without parsing: ``json.loads`` recurses, and 200,000 levels raised ``RecursionError``
  through every caller), or that is not UTF-8 JSON.

What the contents must satisfy (counts non-negative, sums consistent) is checked by the
readers of each kind (``engine/state_checks.py``).
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_HEADER_DEPTH",
    "META_KEY",
    "BlobError",
    "npz_payload",
    "pack",
    "pack_into",
    "read_blob",
]

META_KEY = "__meta__"  # the member holding the JSON metadata
MAX_HEADER_BYTES = 256 * 2**20
MAX_HEADER_DEPTH = 32  # the engine's own header nests about 6 deep
MAX_MEMBERS = 100_000
_PLAIN_KINDS = "biuf"
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


class BlobError(ValueError):
    """Bytes that are not a usable blob, with the reason in words."""


def npz_payload(meta: Any, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``meta`` as JSON beside plain arrays, for ``np.savez``: read back with
    ``allow_pickle=False``, so an object array is refused (TypeError) when written."""
    payload = {META_KEY: np.frombuffer(json.dumps(meta).encode(), np.uint8)}
    for name, arr in arrays.items():
        arr = np.asarray(arr)
        if arr.dtype == object:
            raise TypeError(f"array {name!r} has dtype object; blobs hold plain data")
        payload[name] = arr
    return payload


def pack(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """JSON metadata and plain arrays as one blob (``read_blob`` reads it back)."""
    buf = io.BytesIO()
    pack_into(buf, meta, arrays)
    return buf.getvalue()


def pack_into(fh: BinaryIO, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """:func:`pack` written to an open file: the arrays go out as they are, with no blob
    of them all held in memory."""
    np.savez(fh, **npz_payload(meta, arrays))


def read_blob(source: Path | bytes, max_bytes: int) -> tuple[Any, dict[str, np.ndarray]]:
    """(metadata, arrays) of a file or of bytes; BlobError for anything unusable."""
    try:
        size = source.stat().st_size if isinstance(source, Path) else len(source)
        if size > max_bytes:
            raise BlobError(f"{size} bytes is over the {max_bytes}-byte limit")
        opened = source if isinstance(source, Path) else io.BytesIO(source)
        with zipfile.ZipFile(opened) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_MEMBERS:
                raise BlobError(f"{len(infos)} members (limit {MAX_MEMBERS})")
            members = {_member_name(info): info for info in infos}
            if META_KEY not in members:
                raise BlobError("no metadata member")
            meta = _read_meta(zf, members.pop(META_KEY))
            arrays = {name: _read_array(zf, name, info) for name, info in members.items()}
    except BlobError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise BlobError(f"unreadable ({type(err).__name__}: {err})") from None
    return meta, arrays


def _member_name(info: zipfile.ZipInfo) -> str:
    if not info.filename.endswith(".npy"):
        raise BlobError(f"unexpected member {info.filename!r}")
    return info.filename[:-4]


def _read_meta(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Any:
    raw = _read_array(zf, META_KEY, info)
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.shape[0] > MAX_HEADER_BYTES:
        raise BlobError("metadata is not a bounded byte string")
    try:
        text = raw.tobytes().decode()
    except UnicodeDecodeError as err:
        raise BlobError(f"metadata is not UTF-8: {err}") from None
    depth = json_depth(text)
    if depth > MAX_HEADER_DEPTH:
        raise BlobError(f"metadata nests {depth} deep (limit {MAX_HEADER_DEPTH})")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise BlobError(f"metadata is not JSON: {err}") from None


def json_depth(text: str) -> int:
    """Deepest ``[``/``{`` nesting, counted without parsing (json.loads recurses and
    would raise RecursionError on 100k levels)."""
    depth = deepest = 0
    for ch in _BRACKETS.findall(_STRINGS.sub("", text)):
        depth += 1 if ch in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _read_array(zf: zipfile.ZipFile, name: str, info: zipfile.ZipInfo) -> np.ndarray:
    """One member, refused unless it is an uncompressed plain numeric array whose
    declared shape x itemsize is exactly the bytes the member holds."""
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise BlobError(f"array {name!r} is compressed (blobs store arrays plainly)")
    with zf.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise BlobError(f"array {name!r} has npy format {version}")
        if dtype.kind not in _PLAIN_KINDS or dtype.fields is not None or dtype.subdtype:
            raise BlobError(f"array {name!r} has dtype {dtype}, not plain numbers")
        if fortran:
            raise BlobError(f"array {name!r} is Fortran-ordered")
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise BlobError(f"array {name!r} declares shape {shape}")
        declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
        held = info.file_size - fh.tell()
        if declared != held:
            raise BlobError(
                f"array {name!r} declares {shape} {dtype} ({declared} bytes) but holds {held} bytes"
            )
        data = bytearray(held)  # writable, so the array needs no second copy
        got = fh.readinto(data)
    if got != held:
        raise BlobError(f"array {name!r} is truncated")
    return np.frombuffer(data, dtype).reshape(shape)
