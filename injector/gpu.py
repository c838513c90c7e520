"""NVIDIA GPU facts without importing torch: driver version, /dev/nvidia* nodes, nvidia-smi.
It must never wait on nvidia-smi past its timeout (it hangs when the driver does) nor import CUDA."""
import os
import time

SMI_TIMEOUT = 10.0  # seconds; nvidia-smi answers in well under 1 s on a healthy machine
SMI_FIELDS = "index,name,driver_version,memory.total,memory.used,utilization.gpu"


def driver_version():
    """The kernel module's version from /proc/driver/nvidia/version, or None without a driver."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            first = f.readline()
    except OSError:
        return None
    # `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024`
    for word in first.split():
        if word[:1].isdigit() and "." in word:
            return word
    return first.strip() or None


def devices():
    """[(name, 'rw' or what is missing)] for every /dev/nvidia* node."""
    try:
        names = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
    except OSError:
        return []
    out = []
    for name in names:
        path = "/dev/" + name
        if os.path.isdir(path):
            continue  # /dev/nvidia-caps
        access = ("r" if os.access(path, os.R_OK) else "") + ("w" if os.access(path, os.W_OK) else "")
        out.append((name, access or "no access"))
    return out


def gpu_count(nodes):
    return sum(1 for name, _ in nodes if name[len("nvidia"):].isdigit())


def _which(program):
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(folder or ".", program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def smi(timeout=SMI_TIMEOUT):
    """Run `nvidia-smi --query-gpu`; returns (lines, problem). problem is None, 'absent', or why
    it failed; a run past the timeout is killed and reported as 'timeout'.
    posix_spawn and os pipes only: subprocess would import selectors, signal helpers and more."""
    path = _which("nvidia-smi")
    if path is None:
        return [], "absent"
    read_end, write_end = os.pipe()
    try:
        pid = os.posix_spawn(path, [path, "--query-gpu=" + SMI_FIELDS, "--format=csv,noheader,nounits"],
                             os.environ, file_actions=[
                                 (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                 (os.POSIX_SPAWN_DUP2, write_end, 1),
                                 (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    except OSError as exc:
        os.close(read_end)
        return [], "cannot run %s (%s)" % (path, exc.strerror or exc)
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
                    return [], "timeout"
                time.sleep(0.05)
                continue
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(read_end)
    status = _reap(pid, deadline)
    lines = [l.strip() for l in b"".join(chunks).decode("utf-8", "replace").splitlines() if l.strip()]
    if status != 0:
        return lines, "exit status %s" % status
    return lines, None


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
        time.sleep(0.05)


def _abandon(pid):
    """Kill a hung nvidia-smi; one stuck in the driver (state D) cannot die, so do not wait."""
    try:
        os.kill(pid, 9)
        os.waitpid(pid, os.WNOHANG)
    except OSError:
        pass
