"""Exit records and exception hooks: how the process ended, with its real status and traceback.
It must run the user's original hooks exactly as before and never change an exit status."""
import atexit
import os
import sys
import time
from _thread import get_ident

from earlylog.grammar import records
from earlylog.runtime import state

# How the status is known, since atexit callbacks are not told it (by then the SystemExit is
# gone: sys.exc_info() and sys.last_value are empty):
#   - sys.exit(n) (argparse, click, console scripts), exit()/quit(), os._exit(n): wrapped, each
#     keeping the original and recording n before calling it (os.exec*, wrapped too, leaves an
#     exec record instead: the process goes on as another program);
#   - an uncaught exception: our sys.excepthook sees it (status 1; KeyboardInterrupt 130), unless
#     the interactive prompt goes on after it (see raised._handled_by);
#   - Python 3.12+: sys.monitoring watches the __main__ module's code only (local CALL and
#     PY_RETURN events), which shows `raise SystemExit(n)` at top level and a normal end;
#   - Python 3.9-3.11, a script file: right after its top-level code ends, the interpreter
#     flushes sys.stderr and sys.stdout (pythonrun.c flush_io) while the exception that ended it
#     is still alive; our stdio Tee calls after_main() then, and a SystemExit among the youngest
#     objects (gc generations 0-1) is the one in flight;
#   - Python 3.9-3.11 with `-c` or `-m`: nothing shows a bare `raise SystemExit(n)`; the record
#     then says status 0 and that this case cannot be told apart.

_status = None          # (code, how) of the exit in progress, or None
_flushed = False        # after_main() ran: the end of a script's top-level code was seen
_original = {}          # name -> the function we wrapped
_main = None            # ident of the thread whose SystemExit ends the process
_returned = False       # 3.12+: the __main__ code returned (else a SystemExit may be in flight)
_MAIN_TOOLS = (4, 3)    # sys.monitoring ids no standard tool claims (debugger 0, coverage 1, ...)
MAX_ARG = 200           # characters of an exit call's argument kept in the record


def start(logger):
    """Install the wrappers and hooks (once per lineage: a fork child inherits them)."""
    global _status, _main
    _status, _main = None, get_ident()
    if state.installed:
        return  # a fork child: the wrappers are inherited and read state.logger
    from earlylog.runtime import stdio
    stdio.on_main_flush = after_main
    _wrap(sys, "exit", "sys.exit", _sys_exit)
    _wrap(os, "_exit", "os._exit", _os_exit)
    # Every os.exec* function ends in one of these two, looked up in os's globals at the call.
    _wrap(os, "execv", "os.execv", _os_execv)
    _wrap(os, "execve", "os.execve", _os_execve)
    _wrap_quitter()
    _original["excepthook"] = sys.excepthook
    if sys.excepthook is sys.__excepthook__:
        # Both, so `sys.excepthook is sys.__excepthook__` stays true: code.py, pyrepl, IDLE-like
        # consoles and PyQt take the branch they take without earlylog (docs/design.md#excepthook-twin).
        sys.__excepthook__ = _excepthook
    sys.excepthook = _excepthook
    _original["unraisablehook"] = sys.unraisablehook
    sys.unraisablehook = _unraisablehook
    from earlylog.runtime import imports
    imports.when_imported("threading", _hook_threads)  # not now: threading costs ms of start-up
    imports.when_imported("concurrent.futures._base", _hook_futures)
    if sys.version_info[:2] == (3, 11):  # 3.12+ watch __main__ (_watch_main); 3.9 and 3.10 see below
        imports.when_imported("runpy", _hook_runpy)
    atexit.register(_at_exit)
    _watch_main()


def _wrap(owner, attr, name, replacement):
    _original[name] = getattr(owner, attr)
    setattr(owner, attr, replacement)


def _wrap_quitter():
    """exit() and quit() are site's Quitter objects, created after .pth files run: patch the class."""
    try:
        import _sitebuiltins
    except ImportError:
        return
    _original["exit()"] = _sitebuiltins.Quitter.__call__
    _sitebuiltins.Quitter.__call__ = _quitter_call


def _code(value):
    """The status a SystemExit(value) gives the shell: None 0, an int itself, anything else 1."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF if value >= 0 else value % 256
    return 1


def _saw(value, how, caller=None, lines=None):
    """Note the exit in progress: its status, and the call that asked for it, with its argument
    and place (`sys.exit('no GPU') in main at train.py:12`), so a report says where and why; lines:
    {frame: line} where frames have moved on since (a traceback's: _lines())."""
    global _status
    _status = (_code(value), how)
    try:
        # The repr of an int or a str only: another object's __repr__ is the program's code.
        arg = "" if value is None else repr(value)[:MAX_ARG] if type(value) in (int, str) else \
            "<%s>" % type(value).__name__
        at = outer = None
        if caller is not None:
            # For a call in a library (argparse's exit), also the program's own frame that led there.
            at, outer = _places(caller, lines or {})
        _status = (_status[0], records.exit_call(how, arg, at, outer))
    except BaseException:  # never let the record stop the exit
        pass


def program_frame(frame):
    """The innermost frame of the program's own code from frame outwards (grammar/places.py's
    rule: not the standard library's, a `<frozen ...>` module's, an installed package's nor
    earlylog's, whose wrappers (marks.py) sit between a library and the program), or None. Read at
    exit or on a rare event, never at start-up."""
    from earlylog.grammar import places
    while frame is not None and places.foreign(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _places(caller, lines=None):
    """(the caller's place, and the program's own frame that led there when the call is in a
    library, else None), as exit_call() words them; lines: {frame: line} as _saw() has them."""
    outer = program_frame(caller)
    return _where(caller, lines), _where(outer, lines) if outer is not None and outer is not caller else None


def _where(frame, lines=None):
    return frame.f_code.co_name, frame.f_code.co_filename, (lines or {}).get(frame, frame.f_lineno)


def _sys_exit(status=None):
    """sys.exit, recording the status it was given (in another thread it only ends that thread)."""
    if get_ident() != _main:
        return _original["sys.exit"](status)
    _saw(status, "sys.exit", sys._getframe(1))
    try:
        return _original["sys.exit"](status)
    except SystemExit as exc:
        _caught_or_not(exc)
        raise


def _quitter_call(self, code=None):
    """exit() / quit(), recording the status."""
    if get_ident() != _main:
        return _original["exit()"](self, code)
    _saw(code, "exit", sys._getframe(1))
    try:
        return _original["exit()"](self, code)
    except SystemExit as exc:
        _caught_or_not(exc)
        raise


def _caught_class():
    """_Caught, made at the first exit call (a class costs start-up what no short program uses)."""
    global _Caught

    class _Caught:
        """Rides on the SystemExit an exit call raised, to tell whether that exit happened: the
        program that catches it (pytest.raises(SystemExit), a CLI's own tests) frees it while its own
        code runs (a Python frame calls this __del__), and goes on; one that ends the process is
        freed by the interpreter itself, with no Python frame left. A caught exit's status is not the
        one the shell sees: the record forgets it. Pickled, it is nothing (an exception sent to
        another process)."""
        __slots__ = ("status",)

        def __init__(self, status):
            self.status = status

        def __reduce__(self):
            return tuple, ()

        def __del__(self):
            global _status
            try:
                if _status is self.status and sys._getframe(1) is not None:
                    _status = None
            except BaseException:  # no frame above: the interpreter freed it as the process ends
                pass
    return _Caught


_Caught = None


def _caught_or_not(exc):
    try:
        exc.__dict__["_earlylog_exit"] = (_Caught or _caught_class())(_status)
    except BaseException:  # an exception without a __dict__: the record stays as it was
        pass


def _os_exit(status):
    """os._exit (multiprocessing children end with it): one record, then the real exit. Called from
    another thread than the main one, the record names that thread and where the main thread was:
    the process ends there at once, without its finally blocks, atexit callbacks or buffered output."""
    global _status
    try:
        if isinstance(status, int):  # anything else raises TypeError below, and the process goes on
            caller = sys._getframe(1)
            _saw(status, "os._exit", caller)
            if isinstance(_status, tuple) and get_ident() != _main:
                _status = (_status[0], _status[1] + _other_thread())
            elif isinstance(_status, tuple) and program_frame(caller) is caller:
                # The program's own call, not multiprocessing's or a pool's end of a worker.
                _status = (_status[0], _status[1] + records.exit_from())
            _record()
    except BaseException:  # os._exit must exit whatever happens to our record
        pass
    _original["os._exit"](status)


def _os_execv(path, argv):
    """os.execv (and execl, execlp, execvp, which call it): the exec record, then the real call."""
    _exec_record(path, argv, sys._getframe(1))
    return _original["os.execv"](path, argv)


def _os_execve(path, argv, env):
    """os.execve (and execle, execlpe, execvpe)."""
    _exec_record(path, argv, sys._getframe(1))
    return _original["os.execve"](path, argv, env)


def _exec_record(path, argv, caller):
    """`exec: os.execvp('sh') in main at a.py:3; argv sh -c 'exit 4'`: the process goes on as
    another program, with no exit record of this one; a program that is not Python with earlylog
    writes nothing more here, so the report says what replaced it. Only for a file that can be
    run: execvp tries each folder of PATH, and those tries fail. A failed exec raises OSError and
    the program goes on: the lines after the record say so to the reader."""
    try:
        logger = state.logger
        if logger is None or not (isinstance(path, int) or os.access(path, os.X_OK)) or not logger.file_is_ours():
            return  # a closed log: the lost-file sentence would land in the new program's output
        how, frame = "os.execv", caller
        while frame is not None and frame.f_globals.get("__name__") == "os":  # execvp -> _execvpe -> here
            how, frame = "os." + frame.f_code.co_name, frame.f_back
        at, outer = _places(frame) if frame is not None else (None, None)
        call = records.exit_call(how, repr(os.fsdecode(path) if not isinstance(path, int) else path)[:MAX_ARG],
                                 at, outer)
        from earlylog.runtime import redact, stdio
        for tee in stdio.tees():
            tee.drain()
        # Into the file only: the streams are the new program's next, read as its output (pty.spawn
        # execs in a fork child whose stdout is the terminal it reads).
        logger.event("exec", records.exec_line(call, redact.command([os.fsdecode(a) for a in argv])), console=False)
    except BaseException:  # the exec must happen whatever happens to our record
        pass


def _other_thread():
    """`; from thread loader while the main thread was in main at train.py:40`: os._exit called by
    a thread that is not the main one (read from frames only: no code of the program runs)."""
    threading = sys.modules.get("threading")
    name = "?"
    try:
        thread = threading._active.get(get_ident()) if threading is not None else None
        name = thread._name if thread is not None else "?"
    except Exception:
        pass
    from earlylog.runtime import threads
    main = threads.current_frames().get(_main)
    return records.exit_from(name, _where(main) if main is not None else None)


def _record():
    """Write `exit: status N after S s; how` once per process."""
    global _status
    logger = state.logger
    if logger is None or _status == "written":
        return
    code, how = _status or _unopened() or (0, _unseen())
    _status = "written"
    if code and state.probes_due:
        # A process that fails before its probes ran gets them now: what it ran on may be why.
        from earlylog.runtime import probes
        probes.run_now(logger)
    text = records.exit_line(code, time.time() - logger.started, how)
    threading = sys.modules.get("threading")
    if threading is not None and len(getattr(threading, "_active", ())) > 1:
        from earlylog.runtime import daemons  # stopped at exit without a word: say which were at work
        working = daemons.at_work(program_frame)
        if working:
            text += records.exit_daemons(working)
    dropped = logger.console.dropped
    if dropped:
        text += records.exit_dropped(dropped)
    logger.event("exit", text)


def after_main():
    """Called by the stdio Tee (its on_main_flush) when the interpreter flushes with no Python
    frame on the stack."""
    global _flushed, _status
    if _flushed or _status == "written" or _returned:
        return
    _flushed = True
    import gc
    # type(), not isinstance: isinstance runs a proxy's __class__. The young generations hold
    # thousands of objects; they are matched against the set of exit types in C first.
    exits = _subclasses(SystemExit)
    # A SystemExit in flight is among the youngest objects, unless a full collection ran since it was
    # raised (a long `finally`): the oldest generation is searched only where an exit call was seen,
    # the one case whose answer changes the record, or after a stall (a framework's stop request
    # raised in a stuck call, then its clean-up's collection: the exit's place says the call never
    # returned, read/verdict.py's hang cut short).
    fault = sys.modules.get("earlylog.runtime.fault")
    stuck = fault.stuck_at() if fault is not None else ()
    for generation in (0, 1, 2) if _status is not None or stuck else (0, 1):
        objects = gc.get_objects(generation)
        if exits.isdisjoint(map(type, objects)):
            continue
        # A SystemExit raised where a thread stood stuck at the last stall ended that call: it is the
        # exit, though the frames it left ran `finally` blocks on the way out (which _in_flight reads
        # as a program that caught it and went on).
        obj = next((o for o in objects if type(o) in exits and (_in_flight(o) or _raised_in(o.__traceback__)[1:] in
                                                                stuck)), None)
        if obj is None:
            continue
        if _status is None or _status[0] != _code(obj.code):  # keep "sys.exit" when it was
            _saw(obj.code, "raise SystemExit", _raised_in(obj.__traceback__)[0], _lines(obj.__traceback__))
        return
    # No SystemExit in flight: an exit call seen earlier was caught (pytest.raises(SystemExit), a
    # CLI's own test), and the program went on to its end. Its status is not the one the shell sees.
    _status = None


def _raised_in(tb):
    """(frame, file, line) of the innermost place a traceback passed through, but not a signal
    handler of the program's: an exit raised by a handler is placed in the code the signal
    interrupted, at the line it stood at then; (None, None, None) for no traceback."""
    handlers = set()
    signal = sys.modules.get("signal")
    if signal is not None:
        for number in signal.valid_signals():
            handler = signal.getsignal(number)
            code = getattr(handler, "__code__", None) if type(handler) is type(_raised_in) else None
            if code is not None:
                handlers.add(code)
    found = (None, None, None)
    while tb is not None:
        if tb.tb_frame.f_code not in handlers:
            found = (tb.tb_frame, tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _lines(tb):
    """{frame: the line it stood at when the exception passed it}: a traceback's, since a frame
    that ran a `finally` block on the way out stands at a later line now."""
    lines = {}
    while tb is not None:
        lines[tb.tb_frame] = tb.tb_lineno
        tb = tb.tb_next
    return lines


def _in_flight(exc):
    """Is this SystemExit the one ending the script, not one the program caught and kept (a test
    runner's `raises`)? The program's outermost frame it passed through ended at that line: a frame
    that went on after catching it stands at a later one. (Our exit wrappers' frames are not the
    program's: they re-raise it.)"""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals is globals():
        tb = tb.tb_next
    return tb is None or tb.tb_frame.f_lineno == tb.tb_lineno


def _subclasses(cls):
    """cls and every class derived from it, as a set."""
    found, todo = {cls}, [cls]
    while todo:
        for sub in type.__subclasses__(todo.pop()):
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def _unopened():
    """(2, how) when the script named on the command line never ran because Python could not open
    it (a wrong path, the launcher's most common mistake): Python prints "can't open file" and
    exits 2 with no exception, so no hook sees it; __main__ then has no __file__."""
    script = sys.argv[0] if sys.argv else ""
    main = sys.modules.get("__main__")
    if not script or script in ("-c", "-m") or main is None or "__file__" in vars(main):
        return None
    if os.path.isfile(script) and os.access(script, os.R_OK):
        return None
    return 2, "python could not open the script %r (%s)" % (
        script, "no such file" if not os.path.exists(script) else "not a readable file")


def _unseen():
    if _flushed or getattr(sys, "monitoring", None) is not None:
        return "end of program"
    return "end of program (or a bare SystemExit, which -c and -m hide before Python 3.12)"


def _at_exit():
    """Registered first, so it runs last: after the user's own atexit callbacks."""
    try:
        from earlylog.runtime import stdio, threads
        for tee in stdio.tees():
            tee.drain()
        if state.logger is not None and (hasattr(sys, "ps1") or "IPython" in sys.modules):
            # A console ran (else a sys.last_value is the end of a program whose own hook replaced ours).
            from earlylog.runtime import raised
            raised.handled_last()
        _record()
        threads.quiesce()  # no thread of ours may be inside an import when the interpreter finalizes
    except Exception:  # never let an exception reach the application
        pass


def _excepthook(exc_type, exc, tb):
    """sys.excepthook (and sys.__excepthook__, its twin): the record (raised.py), then the original
    hook. Only an exception that ends the process is printed on the console and becomes its exit
    status; one the interactive prompt (or the program itself) goes on after is logged as handled."""
    global _status
    try:
        if state.logger is not None:
            from earlylog.runtime import raised
            ended = raised.excepthook(exc_type, exc, tb, _main)
            if ended is not None:
                _status = ended
    except Exception:
        pass
    return _original["excepthook"](exc_type, exc, tb)


def _hook_threads():
    threading = sys.modules["threading"]
    _original["threading.excepthook"] = threading.excepthook
    threading.excepthook = _thread_excepthook


def _hook_runpy():
    """`python -m MODULE` on Python 3.11: runpy._run_module_as_main, which the interpreter looks up
    when it runs the module, is wrapped to see how the module's code ended: a normal end (status 0,
    whatever exit it caught before) or a SystemExit and its status, which -m otherwise hides. The
    wrapper's frame is taken off the exception's traceback (stdio.hide_frame), so a program's printed
    traceback reads as without earlylog; Python 3.9 and 3.10 would print it, so they keep the old way."""
    runpy = sys.modules["runpy"]
    if getattr(runpy, "_run_module_as_main", None) is not None:
        _wrap(runpy, "_run_module_as_main", "runpy._run_module_as_main", _run_module_as_main)


def _run_module_as_main(*args, **kwargs):
    global _status
    try:
        result = _original["runpy._run_module_as_main"](*args, **kwargs)
    except SystemExit as exc:
        if _status != "written" and get_ident() == _main:
            if _status is None or _status[0] != _code(exc.code):  # keep "sys.exit" when it was
                tb = exc.__traceback__
                while tb is not None and tb.tb_next is not None:
                    tb = tb.tb_next
                _saw(exc.code, "raise SystemExit", tb.tb_frame if tb is not None else None)
        from earlylog.runtime import stdio
        stdio.hide_frame(exc)
        raise
    except BaseException as exc:
        from earlylog.runtime import stdio
        stdio.hide_frame(exc)
        raise
    if _status != "written":
        _status = (0, "end of program")  # the module's code returned: any exit it asked for was caught
    return result


def _hook_futures():
    """An executor's task that raised (runtime/tasks.py), loaded with concurrent.futures: not on the
    start path."""
    from earlylog.runtime import raised, tasks
    tasks.watch(raised.log_exception)


def _thread_excepthook(args):
    """threading.excepthook: the thread's record (raised.py), then the original hook."""
    try:
        if state.logger is not None:
            from earlylog.runtime import raised
            raised.in_thread(args)
    except Exception:
        pass
    return _original["threading.excepthook"](args)


def _unraisablehook(unraisable):
    """sys.unraisablehook (__del__ errors, callbacks): the record (raised.py), then the original hook."""
    try:
        if state.logger is not None:
            from earlylog.runtime import raised
            raised.unraisable(unraisable, _status == "written")
    except Exception:
        pass
    return _original["unraisablehook"](unraisable)


def _watch_main():
    """Python 3.12+: see `raise SystemExit(n)` and the normal end of the __main__ module's code.
    A global PY_START event finds that code (every other code object is disabled at its first
    call), then only that one code object is watched: cost is one callback per call it makes."""
    mon = getattr(sys, "monitoring", None)
    if mon is None:
        return
    tool = next((t for t in _MAIN_TOOLS if mon.get_tool(t) is None), None)
    if tool is None:
        return
    mon.use_tool_id(tool, "earlylog")
    events = mon.events

    def started(code, offset):
        if code.co_name != "<module>" or sys._getframe(1).f_globals.get("__name__") != "__main__":
            return mon.DISABLE
        mon.set_events(tool, 0)
        mon.set_local_events(tool, code, events.CALL | events.PY_RETURN)
        return None

    def called(code, offset, callee, arg0):
        if isinstance(callee, type) and issubclass(callee, SystemExit):
            _saw(None if arg0 is mon.MISSING else arg0, "raise SystemExit")
            return None
        return mon.DISABLE

    def returned(code, offset, value):
        global _status, _returned
        _returned = True
        if _status != "written":
            _status = (0, "end of program")

    mon.register_callback(tool, events.PY_START, started)
    mon.register_callback(tool, events.CALL, called)
    mon.register_callback(tool, events.PY_RETURN, returned)
    mon.set_events(tool, events.PY_START)
