"""How the benchmark measures: one child process timed (wall and CPU), and paired statistics.
It never judges a number against a budget and never prints; bench.py does both."""
import os
import signal
import threading
import time

DEVNULL = "/dev/null"


def spawn(argv, env, stdout=DEVNULL, stderr=DEVNULL, timeout=300):
    """Start argv, wait for it; returns (wall seconds, CPU seconds of the child, exit status).

    posix_spawn + wait4 rather than subprocess: the same cheap launch for both sides of a pair,
    and the child's own user+sys time, which another load on the machine barely moves.
    A child still running after `timeout` seconds is killed (a hang is a finding, not a wait)."""
    actions = [(os.POSIX_SPAWN_OPEN, 0, DEVNULL, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, stdout, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
               (os.POSIX_SPAWN_OPEN, 2, stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)]
    began = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    killer = threading.Timer(timeout, os.kill, (pid, signal.SIGKILL))
    killer.daemon = True
    killer.start()
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - began
    killer.cancel()
    if wall >= timeout:
        raise RuntimeError("%s ran past %d s and was killed" % (" ".join(argv[-3:]), timeout))
    return wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def quantile(values, q):
    """The q-quantile of values by linear interpolation (q=0.5 is the median)."""
    ordered = sorted(values)
    if not ordered:
        return None
    where = (len(ordered) - 1) * q
    low = int(where)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (where - low)


def summary(values):
    """Median and spread (25th-75th percentile) of one list of numbers."""
    return {"median": quantile(values, 0.5), "p25": quantile(values, 0.25),
            "p75": quantile(values, 0.75), "n": len(values)}


def paired(measured, baseline):
    """Both sides, and the per-pair ratio and difference: pairs taken in the same round cancel
    the drift of a machine that other work is loading at the same time."""
    pairs = list(zip(measured, baseline))
    return {"measured": summary(measured), "baseline": summary(baseline),
            "ratio": summary([a / b for a, b in pairs if b > 0]),
            "added": summary([a - b for a, b in pairs])}


def interleave(rounds, names, run, warmup=1):
    """run(name) for every variant once per round, the order rotating each round (A B, B A, ...)
    so no variant always goes first, after `warmup` rounds (cold caches) that are thrown away.
    Returns {name: [run(name) of each round]}."""
    names = list(names)
    results = {name: [] for name in names}
    for r in range(warmup + rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            value = run(name)
            if r >= warmup:
                results[name].append(value)
    return results
