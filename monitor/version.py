"""The installed monitor's version, without importing anything heavy (``monitor
--version`` must not pay for scipy, pandas or pydantic)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["app_version"]


def app_version() -> str:
    try:
        return version("model-monitor")
    except PackageNotFoundError:  # running from a source tree without metadata
        return "0+unknown"
