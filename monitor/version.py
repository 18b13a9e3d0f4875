"""The installed monitor's version and build revision, without importing anything heavy
(``monitor --version`` must not pay for scipy, pandas or pydantic)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["Build", "app_version", "build"]


def app_version() -> str:
    try:
        return version("model-monitor")
    except PackageNotFoundError:  # running from a source tree without metadata
        return "0+unknown"


@dataclass(frozen=True, slots=True)
class Build:
    revision: str  # the commit id, or "unknown"
    branch: str  # "" when not known (a detached checkout, or not said)


@cache
def build() -> Build:
    """The commit this monitor was built from: ``MONITOR_BUILD_REVISION`` (and
    ``MONITOR_BUILD_BRANCH``) when set — the container image sets them from its build
    arguments — else the git checkout the package runs from (an editable install),
    read from the repository's files, not by running git."""
    revision = os.environ.get("MONITOR_BUILD_REVISION", "").strip()
    branch = os.environ.get("MONITOR_BUILD_BRANCH", "").strip()
    if revision:
        return Build(revision, branch)
    found = _git_head(Path(__file__).resolve().parent.parent)
    if found is None:
        return Build("unknown", branch)
    return Build(found[0], branch or found[1])


def _git_head(tree: Path) -> tuple[str, str] | None:
    """(commit, branch) of the checkout at ``tree``; worktrees and packed refs too."""
    try:
        dot = tree / ".git"
        if dot.is_file():  # a worktree: "gitdir: <path>"
            gitdir = Path(dot.read_text().split(":", 1)[1].strip())
            gitdir = gitdir if gitdir.is_absolute() else (tree / gitdir).resolve()
        elif dot.is_dir():
            gitdir = dot
        else:
            return None
        common = gitdir
        if (gitdir / "commondir").is_file():
            common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
        head = (gitdir / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head, ""
        ref = head[5:]
        branch = ref.removeprefix("refs/heads/")
        for base in (gitdir, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip(), branch
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref:
                    return sha, branch
    except (OSError, IndexError):
        return None
    return None
