"""The reader's typed model of what one process's log says: a frame of a stack (Frame), the stall
it was last in (Stall), the crash (Crash) or exit record (Exit) that ended it. logread builds them
as it reads; the causes and the verdict read them by field name. It owns only these shapes and
their field meanings: it never reads files, parses lines or judges, and it is not the JSON the
report writes (verdict.py builds those dicts, which are the schema)."""
from collections import namedtuple

# One frame of a stack, innermost first in a list: file path, line number, function (`<module>`,
# or `<source>` for a SyntaxError's place). A tuple still, so `path, line, func = frame` works.
Frame = namedtuple("Frame", "file line function")


def as_frames(frames):
    """Frames of (file, line, function) tuples (the runtime's notes write plain ones)."""
    return [Frame(*f) for f in frames]


class Stall:
    """The stall a process was last in, from the watchdog's `stall` line and the dump after it (or
    faulthandler's `Timeout` block when C code held the GIL)."""
    __slots__ = ("time", "text", "threads", "over", "dumped", "gil", "noisy", "since", "stuck", "steps", "task",
                 "resumed")

    def __init__(self, when, text, threads, dumped=False, gil=False):
        self.time = when          # epoch seconds of its `stall` line (None if the line had no time)
        self.text = text          # the line's words (`silent for 30 s; ...`)
        self.threads = threads    # logread.Thread list of its dump; until the dump, the stall before's
        self.over = None          # when its `over` line (or the watchdog's next run, for a GIL stall) came
        self.dumped = dumped      # its own dump was read (a later dump is not this stall's)
        self.gil = gil            # C code held the GIL: the watchdog could not run (faulthandler's Timeout)
        self.noisy = False        # told while other threads printed: only its `over` line ends it
        self.since = None         # for a noisy one: when it began (the last step, the thread's last move)
        self.stuck = None         # for a noisy one: the name of the thread it names as stuck, if any
        self.task = None          # for a noisy one: the asyncio task it names as stuck (`Task-2 (fetch)`),
        #                           on thread `stuck`, whose event loop ran on
        self.steps = None         # for a noisy one: the training heartbeat's words, `steps came every ~0.2 s
        #                           before; last step 5`, when the steps stopped
        self.resumed = None       # when the process next did something after it (its wait ended then)


class Crash:
    """A fatal error faulthandler wrote (`Fatal Python error: Segmentation fault` and the stacks)."""
    __slots__ = ("what", "time", "threads")

    def __init__(self, what, when, threads):
        self.what = what          # its words: `Segmentation fault`, `Aborted`
        self.time = when          # epoch seconds of the last line before it (faulthandler writes no time)
        self.threads = threads    # logread.Thread list of its stacks


class Exit:
    """How a process ended, from its `exit` record(s); every field is None until one is read (a
    process still running, or one killed without a record). A later record (the last flush's
    status 120) overrides the status and keeps the call."""
    __slots__ = ("status", "time", "call", "at", "outer", "by", "main_at", "flush", "daemons", "before")

    def __init__(self):
        self.status = None        # its exit status (int), or None when the record names none
        self.time = None          # epoch seconds of the exit record
        self.call = None          # what ended it: `sys.exit(3) in main at a.py:5`, `os._exit(1) ...`,
        #                           `ended by earlylog: ...` (EARLYLOG_STALL_EXIT), or None
        self.at = None            # the Frame of that call (a file's base name), or None
        self.outer = None         # for a call in a library: the program's own Frame that led there
        self.by = None            # who called os._exit: `thread loader` or `the main thread`
        self.main_at = None       # the main thread's Frame then, when another thread called it
        self.flush = None         # (stream, error, whether its reader went away): the last flush failed (120)
        self.daemons = None       # the daemon threads still at work then, which Python stopped without a
        #                           word: `saver in save at ckpt.py:4, ...`
        self.before = None        # when it last did something before the exit record (verdict._cut_short)


class GilHeld:
    """faulthandler's `Timeout (H:MM:SS)!` block: C code held the GIL, so the watchdog could not run."""
    __slots__ = ("time", "seconds", "threads", "over")

    def __init__(self, when, seconds, threads):
        self.time = when          # epoch seconds of the last line before it (faulthandler writes no time)
        self.seconds = seconds    # how long the watchdog had not run (the timer's timeout)
        self.threads = threads    # logread.Thread list of its stacks (native threads left out)
        self.over = None          # when the watchdog ran again (`stall: the GIL ...`)


# A thread failing again and again between sleeps, from the watchdog's `retrying:` line
# (records.retrying): when, how many failures in how many seconds, and the `handling:` words.
Retry = namedtuple("Retry", "time count seconds handling")
