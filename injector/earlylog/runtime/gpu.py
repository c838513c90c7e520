"""NVIDIA GPU facts without importing torch: driver version, /dev/nvidia* nodes, nvidia-smi.
It must never wait on nvidia-smi past its timeout (it hangs when the driver does) nor import CUDA."""
import os

from earlylog.runtime import fds

SMI_TIMEOUT = 10.0  # seconds; nvidia-smi answers in well under 1 s on a healthy machine
SMI_FIELDS = "index,name,driver_version,memory.total,memory.used,utilization.gpu"


def driver_version():
    """The kernel module's version from /proc/driver/nvidia/version, or None without a driver."""
    data = fds.read("/proc/driver/nvidia/version", 4096)
    if data is None:
        return None
    first = data.decode("ascii", "replace").partition("\n")[0]
    # `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024`
    for word in first.split():
        if word[:1].isdigit() and "." in word:
            return word
    return first.strip() or None


def devices():
    """[(name, 'rw' or what is missing)] for every /dev/nvidia* node."""
    try:
        names = sorted(n for n in fds.listdir("/dev") if n.startswith("nvidia"))
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


def smi(timeout=SMI_TIMEOUT):
    """Run `nvidia-smi --query-gpu`; returns (lines, problem). problem is None, 'absent', or why
    it failed; a run past the timeout is killed and reported as 'timeout'."""
    from earlylog.runtime import spawn
    path = spawn.which("nvidia-smi")
    if path is None:
        return [], "absent"
    try:
        status, out = spawn.run([path, "--query-gpu=" + SMI_FIELDS, "--format=csv,noheader,nounits"], timeout)
    except OSError as exc:
        return [], "cannot run %s (%s)" % (path, exc.strerror or exc)
    if status == "timeout":
        return [], "timeout"
    lines = [l.strip() for l in out.decode("utf-8", "replace").splitlines() if l.strip()]
    if status != 0:
        return lines, "exit status %s" % status
    return lines, None
