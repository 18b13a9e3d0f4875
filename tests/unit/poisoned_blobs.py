"""Crafted blobs a writer of the state or statistics topics (or of a checkpoint file)
could put there: valid zip archives of .npy members that a naive reader would parse."""

from __future__ import annotations

import io
import zipfile

import numpy as np

__all__ = ["deep_json_blob", "zip_bomb"]


def deep_json_blob(depth: int) -> bytes:
    """Metadata nested ``depth`` deep: ``json.loads`` recurses (RecursionError)."""
    meta = np.frombuffer(("[" * depth + "]" * depth).encode(), np.uint8)
    buf = io.BytesIO()
    np.savez(buf, __meta__=meta, x=np.zeros(3))
    return buf.getvalue()


def zip_bomb(inflated: int, member: str = "big") -> bytes:
    """A valid .npz whose member ``member`` is a DEFLATE-compressed array of ``inflated``
    zero bytes: a few hundred KB that ``np.load`` would inflate in full."""
    buf, header, meta = io.BytesIO(), io.BytesIO(), io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "|u1", "fortran_order": False, "shape": (inflated,)}
    )
    np.save(meta, np.frombuffer(b"{}", np.uint8))
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("__meta__.npy", meta.getvalue())
        with zf.open(f"{member}.npy", "w", force_zip64=True) as fh:
            fh.write(np.lib.format.magic(1, 0) + header.getvalue()[8:])
            zeros = bytes(1 << 20)
            for _ in range(inflated >> 20):
                fh.write(zeros)
    return buf.getvalue()
