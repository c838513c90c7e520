"""The import timeline: a phase per module load, lines for third-party packages and slow imports,
and the post-import moment at which library marks are applied. It must not change import semantics."""
import os
import sys
from _thread import get_ident

from earlylog.runtime import state

_original = None
_threshold = 0.0
_marks = None
_phases = None  # runtime/phases.py, made from the start pack at the first import timed (_timeline)
_STDLIB = os.path.dirname(os.__file__) + os.sep
_nesting = {}  # thread ident -> the imports running on it, innermost last (tokens of _begin)
_callbacks = {}  # module name -> functions to call once that module has been imported
# The marks module loads with the first third-party package (every marked library is one), not
# at start-up: a script that imports none pays nothing for the table.
_want_marks = False


def when_imported(name, callback):
    """Call callback() once module `name` is imported: now if it is, else right after its import."""
    if name in sys.modules:
        callback()
    else:
        _callbacks.setdefault(name, []).append(callback)


def start(logger):
    """Install the hook once per interpreter (a fork child keeps it) unless nothing needs it."""
    global _threshold, _want_marks
    _threshold = logger.config.imports
    _want_marks = logger.config.marks
    if _marks is not None:  # a fork child: the parent loaded the marks; point them at our logger
        _marks.start(logger)
    if _original is not None or not (_threshold or _want_marks or _callbacks):
        return
    _hook()


def own_threads():
    """Before the first import of ours in a process (threads.before_imports, set by boot): bind libc,
    load fds with its own files read high, and hook the import system so that what our threads
    import is read, cached and listed through descriptors at libc.FLOOR and up: the import
    system's own open and listdir take the lowest free number and let the program run while they
    hold it (docs/design.md#our-fds-sit-high). The program's imports go on exactly as before.
    libc comes from the start pack's second stage: no file opened for it."""
    from earlylog.runtime import libc
    c = libc.bound()
    if c is None or _listing[0] is not None:
        return
    fds = sys.modules.get(_FDS) or _load_fds(libc, c)
    if _original is None:
        _hook()
    finder = sys.modules["_frozen_importlib_external"].FileFinder
    _listing[0] = finder._fill_cache
    _fill_cache.__code__ = _fill_cache.__code__.replace(co_filename=_EXTERNAL_FILE)
    finder._fill_cache = _fill_cache
    _high[:] = [fds, c]


def _load_fds(libc, c):
    """fds, loaded from its file by path (a finder would list the folder at a low number), its
    files read and its .pyc written high: by libc here, since fds itself does it for the rest."""
    bootstrap, external = sys.modules["_frozen_importlib"], sys.modules["_frozen_importlib_external"]
    spec = external.spec_from_file_location(_FDS, os.path.join(os.path.dirname(__file__), "fds.py"))
    written = []
    spec.loader.get_data = lambda path: libc.read_module(c, path)
    spec.loader.set_data = lambda path, data, _mode=0o666: written.append((path, data, _mode))
    try:
        fds = bootstrap._load(spec)
    finally:
        del spec.loader.get_data, spec.loader.set_data
    setattr(sys.modules["earlylog.runtime"], "fds", fds)  # as an import of the submodule does
    for path, data, mode in written:
        fds.cache(c, path, data, mode)
    return fds


def _hook():
    global _original
    bootstrap = sys.modules["_frozen_importlib"]
    _original = bootstrap._load_unlocked
    _load_unlocked.__code__ = _load_unlocked.__code__.replace(co_filename=_IMPORTLIB_FILE)
    bootstrap._load_unlocked = _load_unlocked


# Why importlib._bootstrap._load_unlocked, and nothing else: every import statement, __import__,
# importlib.import_module and parent-package import that actually executes a module goes through
# it, after the finders have picked a spec and with the module lock held, and it is looked up as
# a module global at each call, so rebinding it is the whole hook. Finders, specs, loaders,
# namespace packages, zip imports, find_spec, reload and lazy loaders see nothing different, and
# an import that is already done or fails to find its module costs nothing. A meta-path finder
# would have to sit in front of every finder and wrap loaders (changing __loader__), and
# _find_and_load also runs for every missing optional module.
# The wrapper carries importlib's own file name because CPython trims the frames of that file from
# import tracebacks (Python/import.c remove_importlib_frames): a module that raises at import shows
# the user exactly the traceback it shows without earlylog. code.replace, not compile(): the
# first compile() in a process costs 2-4 ms of start-up.
_IMPORTLIB_FILE = "<frozen importlib._bootstrap>"
_EXTERNAL_FILE = "<frozen importlib._bootstrap_external>"
_listing = [None]  # FileFinder._fill_cache as it was, once own_threads() replaced it
_high = []  # [fds, libc bound] once own_threads() ran


def _load_unlocked(spec):
    token = _begin(spec)
    loader = _read_high(spec)
    try:
        module = _original(spec)
    except BaseException as exc:
        _end(token, spec, exc)
        raise
    finally:
        if loader is not None:
            del loader.get_data, loader.set_data
    _end(token, spec, None)
    return module


_THREADS, _FDS, _PHASES = "earlylog.runtime.threads", "earlylog.runtime.fds", "earlylog.runtime.phases"


def _ours():
    threads = sys.modules.get(_THREADS)
    return threads is not None and threads.name_of(get_ident()) is not None


def _read_high(spec):
    """In a thread of ours, once own_threads() ran: the loader whose files fds reads and writes high
    for this load (fds.loader_high), else None."""
    try:
        return _high[0].loader_high(spec, _high[1]) if _high and _ours() else None
    except Exception:  # nothing of ours may fail an import
        return None


def _fill_cache(finder):
    """FileFinder._fill_cache: in a thread of ours the folder is listed high (fds.fill_cache); in the
    program's threads, and wherever that cannot be done, importlib's own."""
    if not (_high and _ours() and _high[0].fill_cache(finder)):
        _listing[0](finder)


def _timeline():
    """phases, once: an import statement in _begin and _end would cost every import of the program
    two more trips through the import system."""
    global _phases
    from earlylog.runtime import phases
    _phases = phases
    return phases


def _load_marks():
    global _marks
    from earlylog.runtime import marks
    _marks = marks
    marks.start(state.logger)  # marks what is already imported, this package included


def _third_party(spec):
    """A top-level package from outside the standard library: it gets begin and end lines."""
    origin = spec.origin
    if origin in ("built-in", "frozen") or spec.name == "earlylog":
        return False
    if origin and origin.startswith(_STDLIB):
        return origin.startswith(("site-packages", "dist-packages"), len(_STDLIB))
    return True


class _Import:
    """One module load in progress: its phase, whether it gets begin/end lines (a top-level
    third-party package), and the seconds spent in the imports it makes itself."""
    __slots__ = ("phase", "loud", "inner")

    def __init__(self, phase, loud):
        self.phase, self.loud, self.inner = phase, loud, 0.0


def _begin(spec):
    try:
        if not _threshold or spec.name == _PHASES:
            return None  # the timeline's own module, loaded (from the start pack) by the first import it times
        name = spec.name
        loud = "." not in name and _third_party(spec)
        if loud:
            state.logger.event("phase", "begin import " + name, console=False)
        token = _Import((_phases or _timeline()).begin("import " + name, quiet=True), loud)
        _nesting.setdefault(get_ident(), []).append(token)
        return token
    except Exception:  # nothing of ours may fail an import
        return None


def _end(token, spec, error):
    try:
        if token is not None:
            entry, loud, inner = token.phase, token.loud, token.inner
            took = _phases.end(entry, quiet=True)
            tid = get_ident()
            stack = _nesting.get(tid, [])
            if stack and stack[-1] is token:
                stack.pop()
            if stack:
                stack[-1].inner += took
            else:
                _nesting.pop(tid, None)  # short-lived threads must not leave one empty list each
            if loud and error is not None:
                state.logger.event("phase", "error %s after %.3f s: %s: %s"
                              % (entry.name, took, type(error).__name__, error), console=False)
            elif loud:
                state.logger.event("phase", "end %s after %.3f s" % (entry.name, took),
                              console=took >= _threshold)
            elif error is None and took - inner >= _threshold:
                # Its own code, not the imports it makes: a slow module is named once, not
                # with every package above it (torch._dynamo's chain gave 13 lines).
                state.logger.event("phase", "slow %s after %.3f s" % (entry.name, took))
        if error is None and _marks is None and _want_marks and "." not in spec.name and _third_party(spec):
            _load_marks()  # it marks this package too
        elif error is None and _marks is not None and spec.name in _marks.TABLE:
            _marks.apply(spec.name)
    except Exception:
        pass
    if error is None and spec.name in _callbacks:
        for callback in _callbacks.pop(spec.name):
            try:
                callback()
            except Exception:  # nothing of ours may fail an import
                pass

