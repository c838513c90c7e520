"""Early environment probes: what this process is, where it runs, and findings that explain hangs.
A probe must never import a heavy package, hang the process, or log a secret."""
import os
import stat
import sys

from earlylog.runtime import fds, findings, gpu, kstate, redact, state

# PROBES_AFTER seconds into the process (about 1 ms of work, in a thread of ours, while fork
# waits: threads.gated): process, stdio, env, machine, and the GPU facts that need no program run;
# then the findings those facts allow; then, with no fork held off, nvidia-smi (with a timeout),
# installed package versions, and the findings that need them. A process that fails sooner runs
# the first part at its exit record; one that ends well sooner logs no probes (see
# docs/design.md#probes-come-after-start-up). Each probe sits in its own try: a failing probe
# costs one `probe: AREA: failed (...)` line. Fork children skip the probes: they share their
# parent's environment, which is logged already.

ENV_PREFIXES = ("CUDA_", "NVIDIA_", "NCCL_", "TORCH_", "PYTORCH_", "HF_", "HUGGINGFACE_",
                "TRANSFORMERS_", "ACCELERATE_", "OMP_", "MKL_", "OPENBLAS_", "CUBLAS_", "CUDNN_",
                "GLOO_", "TORCHELASTIC_", "XLA_")
ENV_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV",
             "CONDA_PREFIX", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "SLURM_PROCID", "SLURM_JOB_ID")
RANK_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
STDIO_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONUNBUFFERED")
FLAGS = ("debug", "inspect", "interactive", "optimize", "dont_write_bytecode", "no_user_site",
         "no_site", "ignore_environment", "verbose", "bytes_warning", "quiet", "isolated",
         "dev_mode", "utf8_mode", "safe_path")
# Helper processes that need no nvidia-smi or package scan of their own.
QUIET_ROLES = ("resource-tracker", "forkserver", "mp-child", "fork")


def run_now(logger):
    """Log the fast probes and their findings unless they ran already; the facts, or None."""
    try:
        cwd = state.probes_due.pop()  # one taker: the probe thread or a failing exit record
    except (AttributeError, IndexError):
        return None
    facts = {"env": os.environ, "live": logger.config.live, "logdir": os.path.dirname(logger.path or ""),
             "cwd": cwd}
    for area, probe in (("process", _process), ("stdio", _stdio), ("env", _env),
                        ("machine", _machine), ("gpu", _gpu)):
        _run(logger, area, probe, facts)
    _findings(logger, findings.SYNC, facts)
    return facts


def run_slow(logger, facts):
    """nvidia-smi, package versions and their findings (in the probe thread, never at exit)."""
    if logger.ident.role in QUIET_ROLES or os.environ.get("LOCAL_RANK", "0") != "0":
        return
    for area, probe in (("nvidia-smi", _smi), ("packages", _packages)):
        _run(logger, area, probe, facts)
    _findings(logger, findings.BACKGROUND, facts)


def _run(logger, area, probe, facts):
    try:
        text, more = probe(facts)
        logger.event("probe", "%s: %s" % (area, text), more, console=False)
    except Exception as exc:  # one failing probe is one line, never the process
        logger.event("probe", "%s: failed (%r)" % (area, exc), console=False)


def _findings(logger, checks, facts):
    for check in checks:
        try:
            sentence = check(facts)
        except Exception as exc:
            sentence = None
            logger.event("probe", "finding %s: failed (%r)" % (check.__name__, exc), console=False)
        if sentence:
            logger.event("WARNING", sentence)


def _process(facts):
    cwd = facts["cwd"]
    facts["texts"] = [cwd] + list(sys.argv)
    venv = ("venv %s (base %s)" % (sys.prefix, sys.base_prefix) if sys.prefix != sys.base_prefix
            else "no venv (prefix %s)" % sys.prefix)
    flags = [name for name in FLAGS if getattr(sys.flags, name, 0)]
    uname = os.uname()
    text = ("Python %s %s; %s %s %s; %s; cwd %s; user %s; host %s; flags %s"
            % (sys.version.split()[0], sys.executable, uname.sysname, uname.release, uname.machine,
               venv, cwd, _user(), uname.nodename, " ".join(flags) or "none"))
    more = ["sys.path: " + " ".join(sys.path[:4]) + (" ..." if len(sys.path) > 4 else ""),
            "parent %d: %s" % (os.getppid(), _cmdline(os.getppid()))]
    ranks = ["%s=%s" % (n, os.environ[n]) for n in RANK_NAMES if n in os.environ]
    if ranks:
        more.append("ranks: " + " ".join(ranks))
    return text, more


def _user():
    # $USER rather than pwd: loading pwd's shared library costs ~0.3 ms of the start-up budget.
    name = os.environ.get("USER") or os.environ.get("LOGNAME")
    return "uid %d%s" % (os.getuid(), " ($USER %s)" % name if name else "")


def _cmdline(pid):
    raw = _read("/proc/%d/cmdline" % pid)
    if raw is None:
        return "unknown"
    words = [os.fsdecode(w) for w in raw.split(b"\0")[:-1]]
    return " ".join(redact.argv(words)) or "unknown"


def _stdio(facts):
    parts = []
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        kind, detail = _fd_kind(fd)
        facts[name + "_kind"] = kind
        stream = getattr(sys, name, None)
        if stream is not None and hasattr(stream, "encoding"):
            buffering = "line-buffered" if getattr(stream, "line_buffering", False) else "block-buffered"
            detail += " %s/%s%s" % (stream.encoding, stream.errors,
                                    "" if name == "stdin" else " " + buffering)
        elif stream is None:
            detail += " (sys.%s is None)" % name
        parts.append("%s %s%s" % (name, kind, detail))
    console = sys.stdout if sys.stdout is not None else sys.stderr
    facts["console_encoding"] = getattr(console, "encoding", None)
    env = ["%s=%s" % (n, os.environ[n]) for n in STDIO_ENV if n in os.environ]
    text = "; ".join(parts) + "; filesystem %s; %s" % (sys.getfilesystemencoding(), " ".join(env) or "no locale variables")
    return text, ()


def _fd_kind(fd):
    """(kind, detail) of one fd: closed, tty, pipe (capacity and fill), socket, /dev/null, file."""
    try:
        st = os.fstat(fd)
    except OSError:
        return "closed", ""
    if stat.S_ISFIFO(st.st_mode):
        fill = kstate.pipe_fill(fd)
        return "pipe", " (capacity %d KiB, %d bytes unread)" % (fill[1] >> 10, fill[0]) if fill else ""
    if stat.S_ISSOCK(st.st_mode):
        return "socket", ""
    if os.isatty(fd):
        return "tty", ""
    try:
        path = os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        path = "?"
    if path == os.devnull:
        return "null", ""
    return ("file" if stat.S_ISREG(st.st_mode) else "device"), " " + path


def _env(facts):
    names = sorted(n for n in os.environ if n.startswith(ENV_PREFIXES) or n in ENV_NAMES)
    more = ["%s=%s" % (n, redact.value(n, os.environ[n])) for n in names]
    path = os.environ.get("PATH", "").split(os.pathsep)
    more.append("PATH=%s%s" % (os.pathsep.join(path[:5]), os.pathsep + "..." if len(path) > 5 else ""))
    return "%d variables that matter for training, then PATH (secret-named values shown as %s)" % (
        len(names), redact.MASK), more


def _machine(facts):
    parts = []
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    parts.append("%s CPUs%s" % (os.cpu_count(), " (%d usable)" % affinity if affinity is not None else ""))
    mem = _meminfo()
    facts["ram"] = mem.get("MemTotal")
    if facts["ram"]:
        parts.append("RAM %s (%s available)" % (_size(facts["ram"]), _size(mem.get("MemAvailable", 0))))
    limit, used = _cgroup_memory()
    facts["cgroup_limit"] = limit
    parts.append("memory limit %s" % (_size(limit) + (", %s used" % _size(used) if used else "")
                                      if limit else "none"))
    shm = _disk("/dev/shm", total=True)
    facts["shm"] = shm
    parts.append("/dev/shm %s" % (_size(shm) if shm is not None else "absent"))
    parts.append("free disk %s at cwd, %s at the log folder"
                 % (_size(_disk(".")), _size(_disk(facts["logdir"] or "."))))
    nofile = _open_files_limit()
    if nofile:
        parts.append("open files limit %s (hard %s)" % nofile)
    return "; ".join(parts), ()


def _read(path):
    """A small /proc or /sys file's bytes, or None; through a high descriptor (fds), as our threads
    read: open() in text mode would also cost a TextIOWrapper and a locale lookup per file."""
    return fds.read(path, 65536)


def _open_files_limit():
    """(soft, hard) from /proc/self/limits (importing resource loads a shared library: ~0.5 ms)."""
    for line in (_read("/proc/self/limits") or b"").decode("ascii", "replace").splitlines():
        if line.startswith("Max open files"):
            words = line.split()
            return words[3], words[4]
    return None


def _meminfo():
    out = {}
    for line in (_read("/proc/meminfo") or b"").decode("ascii", "replace").splitlines()[:5]:
        name, _, value = line.partition(":")
        if name in ("MemTotal", "MemAvailable"):
            out[name] = int(value.split()[0]) * 1024
    return out


def _cgroup_memory():
    """(limit, usage) in bytes from cgroup v2 or v1; limit None when unlimited or unknown."""
    folder = "/sys/fs/cgroup"
    for line in (_read("/proc/self/cgroup") or b"").decode("utf-8", "replace").splitlines():
        if line.startswith("0::"):
            folder = "/sys/fs/cgroup" + line[3:].strip().rstrip("/")
    for limit_file, usage_file in ((folder + "/memory.max", folder + "/memory.current"),
                                   ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit = _read_int(limit_file)
        if limit is not False:
            # v1 says "unlimited" with a huge page-rounded number; v2 with "max".
            return (limit if limit and limit < 1 << 60 else None), _read_int(usage_file) or None
    return None, None


def _read_int(path):
    """The integer in a one-line file; None for `max`; False when the file cannot be read."""
    raw = _read(path)
    if raw is None:
        return False
    text = raw.strip()
    return int(text) if text.isdigit() else None


def _disk(path, total=False):
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks if total else st.f_bavail) * st.f_frsize


def _size(n):
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return "%d %s" % (n, unit) if unit == "B" else "%.1f %s" % (n, unit)
        n /= 1024.0
    return "%.1f TiB" % n


def _gpu(facts):
    facts["driver"] = driver = gpu.driver_version()
    nodes = gpu.devices()
    facts["gpus"] = gpu.gpu_count(nodes)
    text = "NVIDIA driver %s" % driver if driver else "no NVIDIA driver (/proc/driver/nvidia/version absent)"
    text += "; " + (", ".join("/dev/%s %s" % n for n in nodes) if nodes else "no /dev/nvidia*")
    return text, ()


def _smi(facts):
    if not facts.get("driver") and not facts.get("gpus"):
        return "not run (no NVIDIA driver or device)", ()
    facts["smi_timeout"] = gpu.SMI_TIMEOUT
    lines, problem = gpu.smi()
    facts["smi_problem"] = problem
    if problem == "timeout":
        return "no answer within %g s (killed)" % gpu.SMI_TIMEOUT, ()
    head = "%d GPU(s): %s" % (len(lines), gpu.SMI_FIELDS) if problem is None else problem
    return head, lines


def _packages(facts):
    from earlylog.runtime import packages
    found = packages.installed()
    facts["found"] = found
    facts["torch_build"] = build = packages.torch_build(found)
    shown = []
    for name in packages.WATCHED:
        if name in found:
            note = ""
            if name == "torch" and build is not None:
                note = " (CUDA %s)" % build["cuda"] if build.get("cuda") else (
                    " (ROCm %s)" % build["hip"] if build.get("hip") else " (CPU-only build)")
            shown.append("%s %s%s" % (name, found[name][0], note))
    return ", ".join(shown) or "none of the watched ML packages", ()
