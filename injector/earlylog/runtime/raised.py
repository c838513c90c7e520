"""Exception records: the `exception:` event of an exception that ends the process, of one the
program or the interactive prompt goes on after (handled), of a thread's and of an unraisable one,
and the second exit record of a last flush that failed. hooks.py installs the hooks and calls in
here at the first exception: this module is in the start pack's second stage, so a program that
raises nothing pays nothing for it at start-up. It never calls the program's hooks (hooks.py
does, whatever happens here) and never raises."""
import os
import sys
import time
from _thread import get_ident

from earlylog.grammar import records
from earlylog.runtime import state

_reported = None  # id() of the exception our sys.excepthook saw last (not the object: its frames)


def excepthook(exc_type, exc, tb, main):
    """sys.excepthook's record: the exit's (status, how) when this exception ends the process,
    else None (it is logged as handled). main: the ident of the thread whose exit ends it."""
    global _reported
    _reported = id(exc)
    handled = _handled_by(main)
    if handled:
        log_exception("handled %s: " % handled, exc_type, exc, tb, console=False)
        return None
    log_exception("", exc_type, exc, tb)
    interrupted = isinstance(exc_type, type) and issubclass(exc_type, KeyboardInterrupt)
    # Python ends an uncaught KeyboardInterrupt by re-raising SIGINT (bpo-1054041): 130.
    return 130 if interrupted else 1, "uncaught %s" % getattr(exc_type, "__name__", exc_type)


def in_thread(args):
    """threading.excepthook's record. sys.exit() in a thread ends only that thread, without a word:
    recorded too, since the main thread may wait for that thread's work (the report says so only
    then)."""
    name = getattr(args.thread, "name", None) or "?"
    log_exception(records.in_thread(name), args.exc_type, args.exc_value, args.exc_traceback,
                  console=args.exc_type is not SystemExit)  # threading prints nothing for it either


def unraisable(unraisable, exited):
    """sys.unraisablehook's record (__del__ errors, callbacks); exited: the exit record is written."""
    where = unraisable.err_msg or "Exception ignored in"
    try:
        where += " %r" % (unraisable.object,) if unraisable.object is not None else ""
    except Exception:
        pass
    log_exception("%s%s: " % (records.UNRAISABLE, where), unraisable.exc_type, unraisable.exc_value,
                  unraisable.exc_traceback)
    if exited:
        _flush_failed(unraisable)


def log_exception(prefix, exc_type, exc, tb, console=True):
    """One `exception` event: the full traceback in the log file; on the console, the frames
    sys.tracebacklimit lets Python print, so the two tracebacks a person sees agree."""
    limit = getattr(sys, "tracebacklimit", None)
    # Python prints the innermost N frames (the traceback module's limit=-N); 0 or less: none.
    limit = None if type(limit) is not int or not console else -max(limit, 0)
    if isinstance(exc_type, type) and issubclass(exc_type, KeyboardInterrupt):
        # Importing traceback or reading source lines (linecache) here clears CPython's
        # "unhandled KeyboardInterrupt" flag, and the process would exit 1 instead of dying by
        # SIGINT (-2): frames only, with nothing imported.
        frames = []
        while tb is not None:
            code = tb.tb_frame.f_code
            frames.append('  File "%s", line %d, in %s' % (code.co_filename, tb.tb_lineno, code.co_name))
            tb = tb.tb_next
        head = prefix + "KeyboardInterrupt"
        lines = shown = ["Traceback (most recent call last):"] + frames + ["KeyboardInterrupt"]
        if limit is not None:
            kept = frames[len(frames) + limit:] if limit else []
            shown = (["Traceback (most recent call last):"] + kept if kept else []) + ["KeyboardInterrupt"]
    else:
        import traceback
        head = "%s%s" % (prefix, traceback.format_exception_only(exc_type, exc)[-1].strip())
        lines = shown = _format(traceback, exc_type, exc, tb, None)
        if limit is not None:
            shown = _format(traceback, exc_type, exc, tb, limit)
    logger = state.logger
    logger.event("exception", head, lines, console=console and shown is lines)
    if console and shown is not lines:
        from earlylog.runtime import sinks
        logger.console.write(logger.formatter.lines(sinks._now(), "exception", head, shown))


def _format(traceback, exc_type, exc, tb, limit):
    """Traceback lines; limit=None: all frames, whatever sys.tracebacklimit says."""
    if limit is None and hasattr(sys, "tracebacklimit"):
        limit = sys.maxsize  # told no limit, the traceback module reads sys.tracebacklimit
    return "".join(traceback.format_exception(exc_type, exc, tb, limit=limit)).rstrip("\n").split("\n")


def _handled_by(main):
    """None when this call of the hook reports the exception that ends the process: Python's
    own call, in the main thread, once the program's code has unwound (no module's code is
    running) and no interactive prompt follows. Else who goes on after it."""
    if _prompt_follows():
        return "at the interactive prompt"
    if get_ident() != main:
        return "by the program (a thread called sys.excepthook)"
    try:
        frame = sys._getframe(3)  # the hook's caller (above hooks' hook, excepthook, here): none when Python's C code called it
    except ValueError:
        return None
    while frame is not None:
        # A module's code still running (the script, runpy, a console's loop, a GUI's event
        # loop) means the caller goes on; a chain of hooks at exit has none.
        if frame.f_code.co_name == "<module>":
            return "by the program (it called sys.excepthook)"
        frame = frame.f_back
    return None


def _prompt_follows():
    """Whether Python's interactive prompt runs after this exception: its loop is running (it
    sets sys.ps1), or -i / PYTHONINSPECT ask for it after the script ends (CPython's main.c
    pymain_repl: with -i, or with stdin a terminal)."""
    if hasattr(sys, "ps1"):
        return True
    flags = sys.flags
    if not (flags.inspect or (not flags.ignore_environment and os.environ.get("PYTHONINSPECT"))):
        return False
    if flags.interactive:
        return True
    try:
        return os.isatty(0)
    except OSError:
        return False


def handled_last():
    """At exit, where a console ran: the last exception it handled without calling sys.excepthook
    (code.interact, 3.13's pyrepl, IPython all set sys.last_value, or sys.last_exc) is logged as
    handled."""
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if isinstance(exc, BaseException) and id(exc) != _reported:
        log_exception("handled at the interactive prompt: ", type(exc), exc, exc.__traceback__, console=False)


def _flush_failed(unraisable):
    """After the exit record, the interpreter's last flush of stdout or stderr failed: Python then
    exits with status 120, not the one recorded. A second `exit:` record says so (the reader keeps
    the last); a BrokenPipeError there means the reader of the output went away (`| head`)."""
    said = unraisable.err_msg or ""  # 3.13: `Exception ignored on flushing sys.stdout`, no object
    if unraisable.object is not None and any(unraisable.object is f for f in (sys.stdout, sys.__stdout__)) or \
            said.endswith("flushing sys.stdout"):
        stream = "stdout"
    elif unraisable.object is not None and any(unraisable.object is f for f in (sys.stderr, sys.__stderr__)) or \
            said.endswith("flushing sys.stderr"):
        stream = "stderr"
    else:
        return
    error = getattr(unraisable.exc_type, "__name__", "an error")
    state.logger.event("exit", records.exit_line(120, time.time() - state.logger.started, records.exit_flush(
        stream, error, issubclass(unraisable.exc_type, BrokenPipeError))))
