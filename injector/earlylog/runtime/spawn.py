"""Runs a helper program (nvidia-smi, gdb, py-spy) with a hard timeout, from any thread.
posix_spawn and os pipes only: subprocess imports threading, and importing threading from one of
our threads makes it threading's main thread, so the real one waits for it forever at exit."""
import os
import time

POLL = 0.05


def which(program):
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(folder or ".", program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def run(argv, timeout, env=None, stderr_too=False):
    """(status, output bytes): status is the exit code, None if the program's own os.wait() took
    it, or "timeout" once it ran past timeout and was killed. Raises OSError if it cannot start."""
    read_end, write_end = os.pipe()
    try:
        pid = os.posix_spawn(argv[0], argv, os.environ if env is None else env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, write_end, 1),
            (os.POSIX_SPAWN_DUP2, write_end, 2) if stderr_too else
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
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
