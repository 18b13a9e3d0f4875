"""The CPUs a process may use and how many of them sit idle, read from the kernel's and
the cgroup's counters: replay's ``--decode-worker auto`` choice (``file_feed``).

Kept apart from the decoding (no numpy, no engine) so that ``monitor replay`` starts its
idle sample before its imports: the imports' second then is the sample, instead of a
wait of its own before the workers can start.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuSample", "idle_cpus", "usable_cpus"]

_CPU_MAX = "/sys/fs/cgroup/cpu.max"
_CPU_STAT = "/sys/fs/cgroup/cpu.stat"
_PROC_STAT = "/proc/stat"
_IDLE_SAMPLE_S = 0.2  # how long the CPUs are watched, at least


@dataclass(frozen=True, slots=True)
class CpuSample:
    """The counters at one moment: each allowed CPU's idle and total jiffies, the
    cgroup's CPU time (µs), this process's own CPU time (s), and when (monotonic s)."""

    cpus: dict[int, tuple[int, int]]
    cgroup_us: int | None
    own_s: float
    at: float

    @staticmethod
    def now() -> CpuSample:
        return CpuSample(_cpu_times(), _cgroup_usage_us(), time.process_time(), time.monotonic())


def idle_cpus(cpus: int, since: CpuSample | None = None, sample_s: float = _IDLE_SAMPLE_S) -> float:
    """How many of this process's CPUs were left to it between ``since`` (None: now)
    and now, waiting for at least ``sample_s`` seconds to have passed: the idle share
    of the ``cpuN`` lines of ``/proc/stat`` for the CPUs in its affinity plus this
    process's own use over the interval (its imports may have kept one busy), at most
    what a cgroup v2 CPU quota leaves to it (``cpu.stat``'s ``usage_usec``, less its
    own). Where neither file reads, the one-minute load average stands in (``cpus``
    minus it).

    Why a sample, not the load average: the one-minute average still counts work that
    ended seconds ago (a replay started right after another job saw no idle CPU and
    decoded in one process on an idle machine), and it counts runnable tasks on every
    CPU, not the ones this process may use."""
    first = since if since is not None else CpuSample.now()
    time.sleep(max(0.0, first.at + sample_s - time.monotonic()))
    second = CpuSample.now()
    elapsed = second.at - first.at
    if not first.cpus or not second.cpus or elapsed <= 0:
        return max(0.0, cpus - os.getloadavg()[0])
    own = (second.own_s - first.own_s) / elapsed
    idle = 0.0
    for cpu, (idle1, total1) in second.cpus.items():
        idle0, total0 = first.cpus.get(cpu, (idle1, total1))
        if total1 > total0:
            idle += (idle1 - idle0) / (total1 - total0)
    idle = min(float(len(second.cpus)), idle + own)
    quota = _cgroup_quota()
    if quota is not None and first.cgroup_us is not None and second.cgroup_us is not None:
        others = (second.cgroup_us - first.cgroup_us) / 1e6 / elapsed - own
        idle = min(idle, max(0.0, quota - others))
    return idle


def _cpu_times() -> dict[int, tuple[int, int]]:
    """Idle and total jiffies of each CPU in this process's affinity (``/proc/stat``);
    empty where the file does not read as documented (proc(5): idle and iowait are the
    idle columns)."""
    try:
        allowed = os.sched_getaffinity(0)
        lines = Path(_PROC_STAT).read_text().splitlines()
    except (AttributeError, OSError):
        return {}
    times: dict[int, tuple[int, int]] = {}
    for line in lines:
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit() or int(name[3:]) not in allowed:
            continue
        try:
            ticks = [int(x) for x in rest.split()[:8]]
        except ValueError:
            return {}
        if len(ticks) < 5:
            return {}
        times[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))
    return times


def _cgroup_usage_us() -> int | None:
    """The cgroup's CPU time so far in µs (cgroup v2 ``cpu.stat``), None without one."""
    try:
        for line in Path(_CPU_STAT).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def _cgroup_quota() -> float | None:
    """A cgroup v2 CPU quota in CPUs (``cpu.max``), None where there is none."""
    try:
        quota, period = Path(_CPU_MAX).read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):  # no cgroup v2 file, or one not as documented
        return None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), at most a cgroup v2 quota's worth
    (``cpu.max``: a container limited to 1.5 CPUs counts 2)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return cpus
