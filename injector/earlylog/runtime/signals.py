"""The program's Python signal handlers, and which of them reach an object: for a thread waiting
on an Event, the handlers that can set it (`set by:` lines), and for the main thread waiting on
a lock inside a handler, the handler it runs in (`in signal handler:`), written by waits.py
through grammar/notes.py; the list of the program's handlers for a dump's header (stacks.py).
It runs in the watchdog thread at dump time only. It must never call a handler nor run any of
the program's code: handlers are found with signal.getsignal(), told apart by exact type
(a function, or a bound method's function), and what they reach is read from their code's
names, their globals and closure cells, and their instance's dict (runtime/introspect.py); it
never installs or changes a handler, never blocks and never raises."""
from earlylog.grammar import records
from earlylog.runtime import introspect

MAX_FRAMES = 40  # frames looked at per thread, as in the dump itself
_FUNCTION = type(lambda: None)


class _Probe:
    def method(self):
        pass


_METHOD = type(_Probe().method)

# The signals a program handles to be told to stop or reload, or to run something on a timer or a
# child's end (SIGINT's own default handler, which raises KeyboardInterrupt, is Python's, not the
# program's: it is a builtin, never a handler here).
_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD", "SIGWINCH")


def handlers(target=None):
    """[(signal name, `FUNC at FILE:LINE`)] of the program's Python signal handlers; with a target,
    only those that reach it: it is among the names the handler's code reads (its globals, closure
    or bound instance), or those of a function of the module it calls, one level down. Read from
    the handlers' dicts and cells, never by calling them."""
    return [(name, where) for name, where, function, handler in _handler_functions()
            if target is None or _reaches(function, handler, target, 2)]


def _handler_functions():
    """(signal name, `FUNC at FILE:LINE`, function, handler) of each Python handler in place."""
    import _signal
    found = []
    for name in _SIGNALS:
        number = getattr(_signal, name, None)
        try:
            handler = _signal.getsignal(number) if number is not None else None
        except (ValueError, OSError):
            continue
        function = _function_of(handler)
        if function is None:
            continue
        code = function.__code__
        found.append((name, records.place(code.co_name, code.co_filename, code.co_firstlineno), function, handler))
    return found


def interrupted_by(frame):
    """[(signal, handler)] for the program's signal handler this stack waits in, if any: Python runs
    a handler on top of whatever the main thread was doing, which may hold the very lock it wants."""
    codes = {}
    for name, where, function, _handler in _handler_functions():
        codes.setdefault(function.__code__, (name, where))
    for f in introspect.outward(frame, MAX_FRAMES):
        if f.f_code in codes:
            return [codes[f.f_code]]
    return []


def _function_of(handler):
    """The Python function behind a handler (a function, or a bound method's), else None."""
    if type(handler) is _METHOD:
        handler = handler.__func__  # exact type: a C member, no program code
    return handler if type(handler) is _FUNCTION else None


def _reaches(function, handler, target, depth):
    """Does the handler's code name the target object (or, depth permitting, call a function that does)?"""
    code, scope = function.__code__, function.__globals__
    values = [scope[n] for n in code.co_names if type(scope) is dict and n in scope]
    values += [cell.cell_contents for cell in function.__closure__ or () if _filled(cell)]
    own = introspect.instance_dict(handler.__self__) if type(handler) is _METHOD else None
    values += [own[n] for n in code.co_names if own is not None and n in own]
    if any(value is target for value in values):
        return True
    return depth > 1 and any(_reaches(value, value, target, depth - 1) for value in values
                             if type(value) is _FUNCTION)


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True
