"""earlylog's start-up, run before any user code when EARLYLOG is set.

What turns it on: the earlylog.pth line (or earlylog.start on Python 3.15+, or the
sitecustomize template on PYTHONPATH) calls start() when EARLYLOG is set to anything but
0, empty, false, off or no. `python -S` and `-I` skip site, and with it earlylog.

The steps, in order, once per process (pid):
  1. config:   read every EARLYLOG_* knob; bad values become warnings and defaults.
  2. log file: open this process's file (EARLYLOG_FILE, EARLYLOG_DIR, the default folder,
               else console only) and the console channel; write the `start:` line.
  3. the features, each in its own try: stdio (live output, tee), exit records and
     exception hooks, the watchdog, the import timeline and library marks; 0.1 s later,
     the watchdog thread loads its module and starts the probes' thread.
  4. fork: os.register_at_fork makes each fork child run these steps again, for its pid.
Only in the main interpreter: a subinterpreter runs the .pth line too, and earlylog stays out.

What happens on failure: a failing step prints one line on stderr naming the step and the
switch that shows more (EARLYLOG_DEBUG=1); the other steps go on, and the user's program runs
as it would without earlylog. Nothing here ever raises into the program.
"""
import os
import sys
import time

from earlylog.runtime import state

PROBES_AFTER = 0.1  # seconds into the process
WATCHDOG_AFTER = 0.1  # how late the watchdog thread loads its module and starts the probes' thread
STD_CLOSED_WAIT = 0.2  # the same where stdin, stdout or stderr is closed
_watching = [None]  # the pid whose watchdog thread starts its probes' thread


def _features():
    """The optional features, in order; each module's start(logger) sits in its own try."""
    from earlylog.runtime import hooks, imports, stdio
    return (("stdio", stdio.start), ("hooks", hooks.start), ("watchdog", _watchdog),
            ("imports", imports.start), ("probes", _probes_soon))


def _watchdog(logger):
    """faulthandler is aimed at the log now, from the main thread; the watchdog thread loads its
    own module (docs/design.md#the-watchdog-loads-in-its-thread)."""
    from earlylog.runtime import fault, imports, threads
    armed = fault.start(logger)
    threads.before_imports(imports.own_threads)
    if armed.threaded:
        threads.start("earlylog-watchdog", _watch, armed)
        _watching[0] = os.getpid()


def _watch(armed, due=None):
    from earlylog.runtime import threads
    if due is None:
        # The watchdog's module loads WATCHDOG_AFTER into the process, and the probes' thread starts
        # then: a process that ends sooner pays for neither (a third of a short process's start-up
        # in wall time), and a program's first moments are its own (docs/design.md#the-watchdog-loads-in-its-thread).
        # The import system reads the module at the lowest free descriptor, which is a closed
        # stdin, stdout or stderr: a program checking its own in its first moments would find it
        # open, so such a process's watchdog loads later still. A fork in the meantime ends the
        # wait, and the thread, until the fork is over.
        due = time.monotonic() + (STD_CLOSED_WAIT if _std_closed() else WATCHDOG_AFTER)
    if not threads.wait_until(due, _watch, armed, due):
        return
    if state.probes_due:
        threads.start("earlylog-probes", _probe_thread, armed.logger, 0)
    try:
        watchdog = threads.gated(_watchdog_module)
    except BaseException as exc:
        _failed("watchdog", exc)
        return
    watchdog.Watchdog(armed).run()


def _std_closed():
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            return True
    return False


def _watchdog_module():
    from earlylog.runtime import watchdog
    return watchdog


def _probes_soon(logger):
    """The probes run PROBES_AFTER seconds into the process in a thread of their own, or at the
    exit record of a process that fails sooner: their modules and reads were a third of start-up,
    and a process that ends well sooner is not the one anybody debugs
    (docs/design.md#probes-come-after-start-up). The working folder is the one at start."""
    state.probes_due = None  # a fork child inherits its parent's, and runs no probes of its own
    if not logger.config.probes or logger.ident.role == "fork":
        return
    try:
        cwd = os.getcwd()
    except OSError as exc:  # deleted or unreadable working folder
        cwd = "unavailable (%s)" % exc.strerror
    state.probes_due = [cwd]
    if _watching[0] != os.getpid():  # else the watchdog thread starts the probes' thread (_watch)
        from earlylog.runtime import threads
        threads.start("earlylog-probes", _probe_thread, logger, time.monotonic() + PROBES_AFTER)


def _probe_thread(logger, due):
    # Let the program run first: without a sleep this thread keeps the GIL for up to a switch
    # interval (5 ms) before the user's code gets it back. A fork in the meantime ends the wait,
    # and the thread, until the fork is over (docs/design.md#no-thread-of-ours-across-a-fork).
    from earlylog.runtime import threads
    if not threads.wait_until(due, _probe_thread, logger, due):
        return
    probes, facts = threads.gated(_probe_now, logger)
    if facts is not None:
        probes.run_slow(logger, facts)


def _probe_now(logger):
    from earlylog.runtime import probes
    return probes, probes.run_now(logger)


def start(origin="api"):
    """Run the steps for this process unless they already ran for this pid; never raises."""
    if state.pid == os.getpid():
        return  # a venv runs .pth lines twice; .pth and sitecustomize may both fire
    if not _main_interpreter():
        return
    state.pid = os.getpid()
    try:
        _start(origin)
    except BaseException as exc:  # never let an exception reach the application
        _failed("start-up", exc)


def _main_interpreter():
    """False in a subinterpreter: Py_NewInterpreter runs site, and so the .pth line, again, with
    a sys.modules of its own (the run-once guard is new there). Threads of ours in it would make
    Py_EndInterpreter abort the process; an isolated one cannot start threads at all.
    set_wakeup_fd checks "main thread of the main interpreter" before it looks at its argument:
    -2 is refused there with ValueError, and in the main interpreter with EBADF, changing nothing.
    About 5 us, nothing imported (importing _interpreters or _xxsubinterpreters takes 0.5 to 3.5 ms)."""
    import _signal
    try:
        _signal.set_wakeup_fd(-2)
    except ValueError:
        return False
    except OSError:
        pass
    return True


def _failed(step, exc):
    from earlylog.runtime import sinks
    debug = state.config is not None and state.config.debug
    sinks.say("%s failed (%r); the program runs on without it%s"
              % (step, exc, "" if debug else " (EARLYLOG_DEBUG=1 shows more)"))
    if debug:
        import traceback
        sinks.say("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip())
    if state.logger is not None:
        state.logger.event("earlylog", "%s failed: %r" % (step, exc), console=False)


def _start(origin, parent_tag=None):
    from earlylog.grammar import records
    from earlylog.runtime import config as config_module, identity, redact, sinks
    started = time.time()
    config = state.config = config_module.Config()
    if not config.enabled:
        for problem in config.problems:
            sinks.say(problem)
        return
    ident = identity.Identity()
    if ident.role == "earlylog":
        return  # the earlylog command reads logs; it must never write into the folder it reads
    if parent_tag is not None:
        ident.forked(parent_tag)
    fd, path = sinks.open_log(config, ident, started, _log_arg(config, ident.argv))
    # A fork child is the same program: it keeps its parent's console choice, unless its stream is
    # a terminal that is not its parent's (pty.fork gave it one to read as data).
    if parent_tag is None:
        parent, shared = sinks.earlylog_parent(config)
        quiet = parent is not None and not shared
    else:
        parent, quiet = None, state.logger is not None and state.logger.console.kind == "off" or \
            _foreign_terminal(config)
    logger = state.logger = sinks.Logger(config, ident, started, fd, path,
                                         sinks.Console("off" if quiet else config.console))
    # The package folder lets a log reader know earlylog's own frames by location (a private
    # runtime copy lives elsewhere than the reader's package), never by a name in the path.
    # The grandparent links a process to its supervisor across a parent that does not log (Ray's
    # raylet); the place in a distributed job (rank, local and node rank, job id) names each rank
    # and its node in a report of many hosts.
    # A fork child's start line stays in its file: the child may exec at once (pexpect, pty.spawn,
    # a daemon's double fork), and its streams are then the new program's output, read as data.
    logger.event("start", records.start_line(
        ident.pid, ident.ppid, "argv " + redact.command(ident.argv), path, origin, _version(),
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), sys.version.split()[0], ident.grandparent,
        ident.place), console=parent_tag is None and parent is None)  # once per run: the first process's
    for problem in config.problems:
        logger.event("WARNING", problem, console=parent_tag is None and parent is None)  # the parent said it already
    if quiet and parent:
        logger.event("note", records.CONSOLE_OFF + "a child of earlylog process %d writes them to its %s only when "
                             "that is its parent's terminal (a pipe, or a terminal a program opened for it, may be "
                             "read as data); they are in this file" % (parent, config.console))
    for name, feature in _features():
        try:
            feature(logger)
        except BaseException as exc:  # one broken feature must not stop the others
            _failed(name, exc)
    if not state.installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_child)
    state.installed = True


def _foreign_terminal(config):
    from earlylog.runtime import sinks
    fd = sinks.CONSOLE_FDS.get(config.console)
    try:
        return fd is not None and os.isatty(fd) and not sinks.parents_terminal(fd, os.getppid())
    except OSError:
        return False


def _after_fork_child():
    """A fork child gets its own file and watchdog; it must take no lock the parent held."""
    try:
        from earlylog.runtime import threads
        if threads.forking_to_exec():
            return
        parent_tag = state.logger.ident.tag if state.logger is not None else "python"
        state.pid = os.getpid()
        threads.forked()
        _start("fork", parent_tag)
    except BaseException as exc:
        _failed("start-up after fork", exc)


def _log_arg(config, argv):
    """EARLYLOG_LOG_ARG=--log: the value of the program's own --log option, if given."""
    option = config.log_arg
    if not option:
        return None
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(option + "="):
            return arg[len(option) + 1:]
    return None


def _version():
    from earlylog import __version__
    return __version__

