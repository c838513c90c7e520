"""Findings: environment facts that explain a hang or an early crash, each as one sentence saying
what to do. Pure functions of the facts the probes gathered; they must never probe anything."""
from earlylog.runtime import packages

# Oldest Linux driver that runs each CUDA major (minor version compatibility), per NVIDIA's
# CUDA Toolkit release notes, table 2 (cuda-toolkit-release-notes, "CUDA Driver").
MIN_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}
SMALL_SHM = 1 << 30
# Companion wheels built against one exact torch release.
TORCH_COMPANIONS = ("torchvision", "torchaudio", "xformers")


def _mib(n):
    return "%d MiB" % (n >> 20) if n < 1 << 30 else "%.1f GiB" % (n / float(1 << 30))


def cuda_visible(facts):
    env = facts["env"]
    wanted = env.get("CUDA_VISIBLE_DEVICES")
    if wanted is None or wanted.strip() in ("", "-1") or facts["driver"] or facts["gpus"]:
        return None
    return ("CUDA_VISIBLE_DEVICES=%s but no NVIDIA device is visible (no driver in "
            "/proc/driver/nvidia, no /dev/nvidia*): CUDA calls will fail or torch falls back to the "
            "CPU; in a container run it with --gpus all (NVIDIA Container Toolkit), on a host check "
            "that `nvidia-smi` works" % wanted)


def memory_limit(facts):
    limit, ram = facts.get("cgroup_limit"), facts.get("ram")
    if not limit or not ram or limit * 2 > ram:
        return None
    return ("the memory limit of this container/cgroup is %s but the machine has %s of RAM: tools "
            "that size themselves by RAM (DataLoader workers, caches) get OOM-killed without a "
            "Python traceback; raise the limit or lower num_workers/batch size" % (_mib(limit), _mib(ram)))


def stdout_pipe(facts):
    if facts["stdout_kind"] != "pipe" or facts["live"] or facts["env"].get("PYTHONUNBUFFERED"):
        return None
    return ("stdout is a pipe and EARLYLOG_LIVE=0: print() output is block-buffered, arrives late and "
            "is lost if the process is killed; set PYTHONUNBUFFERED=1 or print(..., flush=True)")


def console_encoding(facts):
    encoding = facts["console_encoding"]
    texts = [t for t in facts["texts"] if any(ord(c) > 127 for c in t)]
    if not encoding or not texts:
        return None
    try:
        for text in texts:
            # surrogateescape: undecodable bytes in argv/paths are not a console-encoding problem.
            text.encode(encoding, "surrogateescape")
        return None
    except UnicodeEncodeError:
        pass
    except LookupError:
        return None
    return ("the console encoding %s cannot show non-ASCII text in this process's paths or arguments: "
            "print() of them raises UnicodeEncodeError; set PYTHONUTF8=1 or PYTHONIOENCODING=utf-8"
            % encoding)


def torch_driver(facts):
    build, driver = facts.get("torch_build"), facts["driver"]
    cuda = build and build.get("cuda")
    if not cuda or not driver:
        return None
    major = packages.base(cuda)[:1]
    need = MIN_DRIVER.get(major[0]) if major else None
    if need is None or packages.base(driver) >= need:
        return None
    return ("torch is built for CUDA %s, which needs an NVIDIA driver >= %s; this machine's driver is %s: "
            "CUDA init will fail or hang; install a torch wheel for an older CUDA "
            "(https://pytorch.org/get-started/previous-versions/) or update the driver"
            % (cuda, ".".join(str(n) for n in need), driver))


def cpu_torch(facts):
    build = facts.get("torch_build")
    if build is None or build.get("cuda") or build.get("hip") or not facts["gpus"]:
        return None
    return ("torch %s is a CPU-only build but this machine has %d NVIDIA GPU(s): training runs on the CPU "
            "(very slowly); install a CUDA wheel, e.g. pip install torch --index-url "
            "https://download.pytorch.org/whl/cu124" % (facts["found"]["torch"][0], facts["gpus"]))


def torch_companions(facts):
    found = facts["found"]
    if "torch" not in found:
        return None
    torch = packages.base(found["torch"][0])
    wrong = []
    for name in TORCH_COMPANIONS:
        if name not in found:
            continue
        for line in packages.requires(found[name][1]):
            req, spec, marker = packages.requirement(line)
            if req == "torch" and spec.startswith("==") and not marker:
                pinned = spec[2:].split(",")[0]
                if packages.base(pinned) != torch[:len(packages.base(pinned))]:
                    wrong.append("%s %s needs torch %s" % (name, found[name][0], pinned))
    if not wrong:
        return None
    return ("%s, but torch %s is installed: its compiled ops fail to load or crash; install the "
            "matching versions together (pip install torch==X torchvision==Y ...)"
            % ("; ".join(wrong), found["torch"][0]))


def numpy_abi(facts):
    found = facts["found"]
    if "numpy" not in found or packages.base(found["numpy"][0])[:1] < (2,):
        return None
    old = []
    for name, (version, folder) in sorted(found.items()):
        for line in packages.requires(folder):
            req, spec, marker = packages.requirement(line)
            if req == "numpy" and "extra" not in marker and _below_two(spec):
                old.append("%s %s" % (name, version))
    if not old:
        return None
    return ("numpy %s is installed but %s require numpy<2 (built for numpy 1): importing them fails with "
            "'A module that was compiled using NumPy 1.x cannot be run in NumPy 2'; pip install 'numpy<2' "
            "or upgrade them" % (found["numpy"][0], ", ".join(old)))


def _below_two(spec):
    for clause in spec.split(","):
        if clause.startswith("<") and not clause.startswith("<="):
            bound = packages.base(clause[1:])
            if bound and bound[0] == 2 and not any(bound[1:]):
                return True
    return False


def small_shm(facts):
    shm = facts.get("shm")
    if shm is None or shm >= SMALL_SHM or "torch" not in facts["found"]:
        return None
    return ("/dev/shm is only %s: torch DataLoader workers (num_workers > 0) pass batches through it and "
            "die with 'bus error' or hang; run the container with --shm-size=8g or --ipc=host"
            % _mib(shm))


def smi_timeout(facts):
    if facts.get("smi_problem") != "timeout":
        return None
    return ("nvidia-smi did not answer within %d s: the NVIDIA driver is probably stuck (a GPU fallen off "
            "the bus, Xid errors in `dmesg`), and CUDA init in this process will hang too; check "
            "`dmesg | grep -i xid`, reset the GPU or reboot" % facts["smi_timeout"])


# Findings from the fast facts, logged before user code; the rest need the background probes.
SYNC = (cuda_visible, memory_limit, stdout_pipe, console_encoding)
BACKGROUND = (smi_timeout, torch_driver, cpu_torch, torch_companions, numpy_abi, small_shm)
