"""Memory breadcrumbs, so a process the OOM killer ends leaves its last numbers: rss, cgroup, oom_kill.
It must only read /proc and /sys, and offer a line only when something moved (an idle log stays short)."""
import os

from earlylog.grammar import records
from earlylog.runtime import fds

MOVED = 0.10       # a change of this share (or of STEP bytes) is worth a new line
STEP = 256 << 20
_MIB = 1 << 20


def _read(path, keep=True):
    # Read at every sample: kept open and re-read (docs/design.md#our-fds-sit-high).
    return (fds.read(path, keep=keep) or b"").decode("ascii", "replace")


def _cgroup_files():
    """(usage file, limit file, oom counter file, counter name) of this process's memory cgroup."""
    v1 = v2 = None
    for line in _read("/proc/self/cgroup", keep=False).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif len(parts) == 3 and "memory" in parts[1].split(","):
            v1 = parts[2]
    if v1 is not None:
        base = _existing("/sys/fs/cgroup/memory" + v1, "/sys/fs/cgroup/memory", "memory.usage_in_bytes")
        if base:
            return (base + "/memory.usage_in_bytes", base + "/memory.limit_in_bytes",
                    base + "/memory.oom_control", "oom_kill")
    if v2 is not None:
        # In a container the cgroup namespace usually shows "/", so the root files are ours.
        base = _existing("/sys/fs/cgroup" + v2.rstrip("/"), "/sys/fs/cgroup", "memory.current")
        if base:
            return (base + "/memory.current", base + "/memory.max", base + "/memory.events", "oom_kill")
    return None


def _existing(path, fallback, probe):
    for base in (path, fallback):
        if os.path.exists(base + "/" + probe):
            return base
    return None


class Sampler:
    """Samples memory; line() returns the `mem:` text when it is worth writing, else None."""
    every = 5.0  # seconds between samples

    def __init__(self):
        self.files = _cgroup_files()
        self.last = None
        try:
            self.page = os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            self.page = 4096

    def sample(self):
        rss = _number(_read("/proc/self/statm").split()[1:2], self.page)
        used = limit = oom = None
        if self.files:
            used = _number(_read(self.files[0]).split(), 1)
            limit = _number(_read(self.files[1]).split(), 1)
            for line in _read(self.files[2]).splitlines():
                key, _, value = line.partition(" ")
                if key == self.files[3]:
                    oom = _number([value], 1)
            if limit is not None and limit >= 1 << 60:
                limit = None  # "max" or the v1 "unlimited" page-rounded 2**63
        return rss, used, limit, oom

    def line(self):
        now = self.sample()
        last, self.last = self.last, now
        if last is not None and not _moved(last[0], now[0]) and not _moved(last[1], now[1]) \
                and last[3] == now[3]:
            self.last = last  # compare against the last written line, so slow growth still shows
            return None
        rss, used, limit, oom = now
        rose = oom is not None and last is not None and last[3] is not None and oom > last[3]
        return records.mem_line(_mib(rss), _mib(used) if used is not None else None, _mib(limit) if limit else None,
                                100 * used // limit if used is not None and limit else None, oom,
                                last[3] if rose else None)


def _number(words, scale):
    try:
        return int(words[0]) * scale
    except (IndexError, ValueError):
        return None


def _moved(old, new):
    if old is None or new is None:
        return old != new
    return abs(new - old) >= min(STEP, max(old * MOVED, _MIB))


def _mib(n):
    return "?" if n is None else "%d MiB" % (n // _MIB)
