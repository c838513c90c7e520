"""Runs a helper program (nvidia-smi, gdb, py-spy) with a hard timeout, from any thread.
posix_spawn and os pipes only: subprocess imports threading, and importing threading from one of
our threads makes it threading's main thread, so the real one waits for it forever at exit.
Its pipe and anonymous file sit high (fds): a program that closes a stale number never closes them."""
import os
import time

from earlylog.runtime import fds

POLL = 0.05
MAX_OUTPUT = 4 << 20  # bytes kept of a to_file program's output


def which(program):
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(folder or ".", program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def run(argv, timeout, env=None, stderr_too=False, to_file=False):
    """(status, output bytes): status is the exit code, None if the program's own os.wait() took
    it, or "timeout" once it ran past timeout and was killed. Raises OSError if it cannot start.
    to_file: the output goes to an anonymous file read at the end, never a pipe: a tool that
    stops this process (gdb, py-spy) must not block on a full pipe only a stopped thread reads."""
    if to_file and hasattr(os, "memfd_create"):
        out = fds.memfd("earlylog-output")
        try:
            pid = _spawn(argv, env, out, stderr_too)
            status = _reap(pid, time.monotonic() + timeout)
            return status, os.pread(out, MAX_OUTPUT, 0)
        finally:
            os.close(out)
    read_end, write_end = fds.pipe()
    try:
        pid = _spawn(argv, env, write_end, stderr_too)
    except OSError:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    os.set_blocking(read_end, False)
    deadline = time.monotonic() + timeout
    chunks = []
    try:
        while True:
            try:
                data = os.read(read_end, 65536)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    _abandon(pid)
                    return "timeout", b"".join(chunks)
                time.sleep(POLL)
                continue
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(read_end)
    return _reap(pid, deadline), b"".join(chunks)


def _spawn(argv, env, out, stderr_too):
    # setsigmask: the tool starts with no signal blocked, whatever our thread blocks.
    return os.posix_spawn(argv[0], argv, os.environ if env is None else env, setsigmask=(), file_actions=[
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out, 1),
        (os.POSIX_SPAWN_DUP2, out, 2) if stderr_too else
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])


def _reap(pid, deadline):
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None  # the program's own os.wait() took it
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            _abandon(pid)
            return "timeout"
        time.sleep(POLL)


def _abandon(pid):
    """Kill a hung helper; one stuck in the kernel (state D) cannot die, so do not wait."""
    try:
        os.kill(pid, 9)
        os.waitpid(pid, os.WNOHANG)
    except OSError:
        pass
