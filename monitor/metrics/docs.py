"""Rewrite the generated metric table of docs/metrics.md: ``python -m monitor.metrics.docs``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .registry import docs_table

_START, _END = "<!-- metric table: generated -->\n", "<!-- end of metric table -->"


def main(path: str = "docs/metrics.md") -> int:
    page = Path(path).read_text()
    new, n = re.subn(
        re.escape(_START) + ".*?" + re.escape(_END), lambda _: _START + docs_table() + _END, page,
        flags=re.S,
    )  # fmt: skip
    if n != 1:
        print(f"{path}: no generated metric table markers", file=sys.stderr)
        return 1
    Path(path).write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
