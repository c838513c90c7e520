"""Says what this process is: argv, role (script, -m module, multiprocessing child, rank...), rank,
its place in a distributed job (local rank, node rank, world size, job id) and its process title.
Read-only: it looks at sys, os.environ and /proc, and must never change any of them."""
import os
import sys

from earlylog.grammar import records

# multiprocessing starts its helpers with `python -c "from multiprocessing.X import ..."`.
_MP_ROLES = (
    ("multiprocessing.resource_tracker", "resource-tracker"),
    ("multiprocessing.forkserver", "forkserver"),
    ("multiprocessing.spawn", "mp-child"),
    ("multiprocessing.semaphore_tracker", "resource-tracker"),
)


def argv():
    """The full command line: sys.orig_argv (3.10+), else /proc/self/cmdline, else sys.argv."""
    orig = getattr(sys, "orig_argv", None)
    if orig:
        return list(orig)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read()
        return [os.fsdecode(part) for part in raw.split(b"\0")[:-1]]
    except OSError:
        return [sys.executable] + list(getattr(sys, "argv", []))


def rank(environ=os.environ):
    """The distributed rank from torchrun/accelerate/SLURM/MPI variables, or None."""
    for name in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


# Where a process sits in a distributed job, first match wins: torchrun (and accelerate, Lightning)
# set RANK, LOCAL_RANK and GROUP_RANK; Slurm sets SLURM_* in every task (under `srun torchrun`
# SLURM_PROCID is the agent's task, so torchrun's names come first); MPI launchers set their own.
_PLACE = (
    ("local_rank", ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")),
    ("node_rank", ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID")),
    ("world_size", ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")),
)


def place(args, environ=os.environ):
    """`rank=3 local_rank=1 node_rank=1 world_size=8 job=4711`: what is known of this process's place
    in a distributed job (the names with no value left out), or "" outside one."""
    found = [("rank", rank(environ))]
    for key, names in _PLACE:
        found.append((key, next((int(environ[n]) for n in names if environ.get(n, "").isdigit()), None)))
    if found[2][1] is None and role(args, environ) == "torchrun":
        found[2] = ("node_rank", _option(args, ("--node-rank", "--node_rank")))  # the agent's own node
    # torchrun's attempt: 0, then 1 after its agent restarted the group (--max-restarts).
    restart = environ.get("TORCHELASTIC_RESTART_COUNT", "")
    found.append(("restart", int(restart) if restart.isdigit() and rank(environ) is not None else None))
    run = environ.get("TORCHELASTIC_RUN_ID", "")
    job = environ.get("SLURM_JOB_ID") or (run if run not in ("", "none") else None)
    found.append(("job", records.safe_name(job) if job else None))
    return " ".join("%s=%s" % (key, value) for key, value in found if value is not None)


def parent_of(pid):
    """The parent pid of a process from /proc (None when unknown or init): a report of a run whose
    middle process does not log (Ray's raylet between the driver and its workers) still knows who
    started whom."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            ppid = int(f.read().rpartition(b")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return ppid if ppid > 1 else None


def _option(args, names):
    """The integer value of a command-line option given as `--name N` or `--name=N`, else None."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in names:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            return int(value) if value.isdigit() else None
    return None


def title(start_argv):
    """The process title when the program has changed it since start (Ray names a worker after its
    task, `ray::train_step`; setproctitle users do the same), else None. Read at dump time only."""
    from earlylog.runtime import fds  # at dump time only: never on the start-up path
    raw = fds.read("/proc/self/cmdline", keep=True)  # a high descriptor, kept for the next dump
    if raw is None:
        return None
    # setproctitle pads the old argv area with NULs or spaces: only the words count.
    now = " ".join(os.fsdecode(raw).replace("\0", " ").split())
    return now[:200] if now and now != " ".join(" ".join(start_argv).split()) else None


_NO_VALUE = "bBdEhiIOqsSuvVxPR"  # interpreter flags that take no value and may be clustered


def role(args, environ=os.environ):
    """A short word for what the process is, used in file names and line tags."""
    if environ.get("TORCHELASTIC_RUN_ID") is not None and rank(environ) is not None:
        return "rank"
    i = 1
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2 and arg[1] in _NO_VALUE:
            arg = "-" + arg[1:].lstrip(_NO_VALUE)  # a cluster: -Bc CODE is -B -c CODE
            if arg == "-":
                i += 1
                continue
        if arg in ("-W", "-X", "-Q", "--check-hash-based-pycs"):
            i += 2
            continue
        if arg == "-c":
            code = args[i + 1] if i + 1 < len(args) else ""
            for module, name in _MP_ROLES:
                if module in code:
                    return name
            return "cmd"
        if arg == "-m" or (arg.startswith("-m") and len(arg) > 2):
            module = arg[2:] or (args[i + 1] if i + 1 < len(args) else "module")
            if module in ("torch.distributed.run", "torch.distributed.launch"):
                return "torchrun"
            return module
        if not arg.startswith("-"):
            base = os.path.basename(arg)
            return base[:-3] if base.endswith(".py") else base
        i += 1
    return "repl"


def tag(role_name, rank_number):
    """The role/rank token of every log line, e.g. `train`, `rank1`, `mp-child`."""
    if role_name == "rank":
        return "rank%d" % rank_number
    return role_name if rank_number is None else "%s.r%d" % (role_name, rank_number)


class Identity:
    """Who this process is, read once at start (and again in a fork child)."""

    def __init__(self, environ=os.environ):
        self.pid = os.getpid()
        self.ppid = os.getppid()
        self.grandparent = parent_of(self.ppid)
        self.argv = argv()
        self.rank = rank(environ)
        self.role = role(self.argv, environ)
        self.tag = tag(self.role, self.rank)
        # Only a rank or torchrun's agent has a place: the other processes skip its look-ups (each
        # missing variable costs an exception inside os.environ.get, some 50 us for all of them).
        self.place = place(self.argv, environ) if self.rank is not None or self.role == "torchrun" else ""
        self.host = os.uname().nodename if hasattr(os, "uname") else "localhost"

    def forked(self, parent_tag):
        """The same identity for a fork child: new pid, role saying whose child it is."""
        self.pid = os.getpid()
        self.ppid = os.getppid()
        self.grandparent = parent_of(self.ppid)
        self.role = "fork"
        self.tag = "fork<" + parent_tag.split("<")[0]
        return self
