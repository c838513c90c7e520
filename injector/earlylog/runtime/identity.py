"""Says what this process is: argv, role (script, -m module, multiprocessing child, rank...), rank.
Read-only: it looks at sys, os.environ and /proc, and must never change any of them."""
import os
import sys

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


def safe_name(text):
    """Text made safe for a file name: letters, digits, '.', '_' and '-' only, 40 at most."""
    kept = "".join(c if c.isalnum() or c in "._-" else "_" for c in text)
    return kept[:40] or "python"


class Identity:
    """Who this process is, read once at start (and again in a fork child)."""

    def __init__(self, environ=os.environ):
        self.pid = os.getpid()
        self.ppid = os.getppid()
        self.argv = argv()
        self.rank = rank(environ)
        self.role = role(self.argv, environ)
        self.tag = tag(self.role, self.rank)
        self.host = os.uname().nodename if hasattr(os, "uname") else "localhost"

    def forked(self, parent_tag):
        """The same identity for a fork child: new pid, role saying whose child it is."""
        self.pid = os.getpid()
        self.ppid = os.getppid()
        self.role = "fork"
        self.tag = "fork<" + parent_tag.split("<")[0]
        return self
