"""Reads every EARLYLOG_* knob from the environment into one Config, once per process.
Bad values never raise: each becomes a plain sentence in `Config.problems` and the default."""
import os

from earlylog import OFF_WORDS
from earlylog.grammar.records import DEFAULT_STALL

MAX_SECONDS = 1e6  # about 11 days; more overflows the watchdog's timers
TRUE_WORDS = ("1", "true", "on", "yes")
MIB = 1 << 20
MAX_MIB = 1 << 20  # a TiB

# Knob name -> (kind, default, help). The README's knob table says the same in words.
KNOBS = {
    "EARLYLOG": ("switch", False, "1 turns earlylog on in every Python process of this environment"),
    "EARLYLOG_DIR": ("path", None, "log folder, one file per process (default: a per-user folder under the temp dir)"),
    "EARLYLOG_FILE": ("path", None, "exact log file for this process tree (lines are pid-tagged); overrides EARLYLOG_DIR"),
    "EARLYLOG_STALL": ("seconds", DEFAULT_STALL, "seconds of silence before every thread's stack is dumped; 0 disables"),
    "EARLYLOG_STALL_EXIT": ("seconds", 0.0, "end a process stuck this long (as the report judges it) with exit "
                                            "status 124, so its launcher restarts it; 0 disables"),
    "EARLYLOG_ON_STALL": ("text", "", "a shell command run once per confirmed stall, given the stall as JSON on stdin"),
    "EARLYLOG_DUMP_EVERY": ("seconds", 0.0, "dump every thread's stack this often regardless of activity; 0 disables"),
    "EARLYLOG_CONSOLE": (("stderr", "stdout", "off", "all"), "stderr",
                         "where earlylog's lines that need a person go besides the file; all: every line, on stderr"),
    "EARLYLOG_FORMAT": (("text", "json"), "text", "log line format; json gives one JSON object per line"),
    "EARLYLOG_MAX_LOG": ("mib", 256.0, "MiB a process's log file may grow to: past three quarters of it, the "
                                       "program's output copy keeps its last part only; 0: no bound"),
    "EARLYLOG_LIVE": ("flag", True, "make sys.stdout/sys.stderr line-buffered so print() arrives at once"),
    "EARLYLOG_TEE": ("flag", True, "copy the program's own stdout/stderr lines into the log file"),
    "EARLYLOG_PROBES": ("flag", True, "log the environment probes (process, stdio, machine, GPU, packages)"),
    "EARLYLOG_IMPORTS": ("seconds", 0.5, "log any submodule import slower than this; top-level packages always; 0: off"),
    "EARLYLOG_MARKS": ("flag", True, "mark torch/accelerate/transformers steps (CUDA init, init_process_group, ...)"),
    "EARLYLOG_REDACT": ("text", "", "extra comma-separated words; env names containing them are redacted"),
    "EARLYLOG_LOG_ARG": ("text", "", "take the log file path from the program's own option, e.g. --log"),
    "EARLYLOG_NATIVE": ("flag", False, "add py-spy or gdb native stacks to a blocked process's first stall dump "
                                       "(it pauses the process while they are read)"),
    "EARLYLOG_DEBUG": ("flag", False, "print earlylog's own internal errors with tracebacks"),
}


class Config:
    """The parsed knobs; each attribute is the knob of the same name (see KNOBS for its meaning)."""

    def __init__(self, environ=None):
        environ = os.environ if environ is None else environ
        self.problems = []

        def knob(name):
            kind, default, _help = KNOBS[name]
            return self._parse(name, kind, default, environ.get(name))
        self.enabled = knob("EARLYLOG")
        self.dir = knob("EARLYLOG_DIR")
        self.file = knob("EARLYLOG_FILE")
        self.stall = knob("EARLYLOG_STALL")
        self.stall_exit = knob("EARLYLOG_STALL_EXIT")
        self.on_stall = knob("EARLYLOG_ON_STALL")
        if self.on_stall and not self.stall:
            self.problems.append("EARLYLOG_ON_STALL needs EARLYLOG_STALL above 0 to see stalls; it is off")
            self.on_stall = ""
        self.dump_every = knob("EARLYLOG_DUMP_EVERY")
        self.console = knob("EARLYLOG_CONSOLE")
        # `all` is stderr with every line a writer offers it, as before the console's rule (issue 38).
        self.console_all = self.console == "all"
        if self.console_all:
            self.console = "stderr"
        self.format = knob("EARLYLOG_FORMAT")
        self.max_log = int(knob("EARLYLOG_MAX_LOG") * MIB)
        self.live = knob("EARLYLOG_LIVE")
        self.tee = knob("EARLYLOG_TEE")
        self.probes = knob("EARLYLOG_PROBES")
        self.imports = knob("EARLYLOG_IMPORTS")
        self.marks = knob("EARLYLOG_MARKS")
        self.redact = knob("EARLYLOG_REDACT")
        self.log_arg = knob("EARLYLOG_LOG_ARG")
        self.native = knob("EARLYLOG_NATIVE")
        self.debug = knob("EARLYLOG_DEBUG")

    def _parse(self, name, kind, default, raw):
        if raw is None:
            return default
        value = raw.strip()
        if kind in ("switch", "flag"):
            if value.lower() in TRUE_WORDS:
                return True
            if value.lower() in OFF_WORDS:
                return False
            self.problems.append("%s=%r is not one of 1/true/on/yes or 0/false/off/no; using %s"
                                 % (name, raw, "on" if default else "off"))
            return default
        if kind == "mib":
            try:
                number = float(value)
            except ValueError:
                number = -1.0
            if 0 <= number <= MAX_MIB:
                return number
            self.problems.append("%s=%r is not a number of MiB (0 to %d); using %g" % (name, raw, MAX_MIB, default))
            return default
        if kind == "seconds":
            try:
                number = float(value)
            except ValueError:
                number = -1.0
            if 0 <= number <= MAX_SECONDS:  # also refuses nan and inf
                return number
            self.problems.append("%s=%r is not a number of seconds (0 to 1e6); using %g"
                                 % (name, raw, default))
            return default
        if isinstance(kind, tuple):
            if value.lower() in kind:
                return value.lower()
            self.problems.append("%s=%r is not one of %s; using %s"
                                 % (name, raw, "/".join(kind), default))
            return default
        return value or default
