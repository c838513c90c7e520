"""libc through _ctypes alone, and the one C call that makes a descriptor at FLOOR or up
(docs/design.md#our-fds-sit-high). It is in the start pack's second stage (earlylog.runtime.LATER), made
from memory, with no file opened, at the first import of ours in a process (imports.own_threads),
where libc is bound and fds
loaded with its files read here, so that from a process's first instruction on our threads read
module files, list folders and open files with no low number theirs while the program's Python
code can run.
- Bound through the `_ctypes` extension only, found by stat (no folder listing) and loaded by
  dlopen, which keeps the GIL: the `ctypes` package would read a dozen module files at low numbers,
  cost 0.7 MiB, and make a libffi closure at import.
- Functions called through `keep` keep the GIL for the call (as ctypes.PyDLL's do); those through
  `free` let it go (ctypes.CDLL's).
It never raises from bound() (None: not Linux, or no _ctypes), and it imports nothing of the
program's. Small on purpose: every line here is hashed at every start, and unmarshalled in every
process that starts a thread of ours."""
import os
import sys
from _thread import allocate_lock  # at start-up: before gevent's monkey-patching can replace it

from earlylog.runtime.state import HIGH_FD

# Above the first numbers from HIGH_FD, where start-up puts each process's log file and console: a
# fork child inherits the descriptors we keep and must still find its own place there.
FLOOR = HIGH_FD + 64
LOW_FLOOR = 10        # where the open-files limit is at or under FLOOR (sinks._high_fd does the same)
F_DUPFD_CLOEXEC = 1030
_bound = []           # [Libc or None] once tried
_binding = allocate_lock()  # held while a thread binds


def bound():
    """libc bound (see _bind: .keep and .free functions, c_int, buffer(), get_errno), on first use
    by any of our threads (the others wait for it), or None."""
    if not _bound:
        with _binding:
            if not _bound:
                try:
                    module = _load_ctypes() if sys.platform.startswith("linux") else None
                    _bound.append(_bind(module) if module is not None else None)
                except Exception:
                    _bound.append(None)
    return _bound[0]


def _bind(c):
    # The classes are made here, not at import: this module is on the start path, and each class
    # made there costs every process's start-up.
    class Keep(c.CFuncPtr):  # keeps the GIL through the call, as ctypes.PyDLL's functions do
        _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_PYTHONAPI | c.FUNCFLAG_USE_ERRNO

    class Free(c.CFuncPtr):  # lets it go, as ctypes.CDLL's do
        _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO

    class Functions:  # libc's functions by name, made once (AttributeError: no such symbol)
        def __init__(self, kind):
            self._kind = kind

        def __getattr__(self, name):
            function = self._kind((name, libc))
            setattr(self, name, function)
            return function

    class Int(c._SimpleCData):
        _type_ = "i"

    class Char(c._SimpleCData):
        _type_ = "c"

    class Libc:
        """What fds.py and the import hook need of libc and C types."""
        _handle = c.dlopen(None, 0)  # the process itself: libc's symbols (CFuncPtr reads _handle)
        keep, free = Functions(Keep), Functions(Free)
        c_int, get_errno = Int, staticmethod(c.get_errno)
        getdents64 = {"x86_64": 217, "aarch64": 61}.get(os.uname().machine)  # None: os.listdir

        @staticmethod
        def buffer(size):
            return (Char * size)()  # zeroed; .raw is its bytes
    libc = Libc()
    return libc


def _load_ctypes():
    """The _ctypes extension module, found by os.stat in sys.path's lib-dynload folders (a finder
    would list folders at low numbers) and loaded under its module lock as an import would."""
    module = sys.modules.get("_ctypes")
    if module is not None or "_ctypes" in sys.builtin_module_names:
        return module or __import__("_ctypes")
    import _imp
    import _frozen_importlib as bootstrap
    import _frozen_importlib_external as external
    for folder in sys.path:
        if not isinstance(folder, str) or os.path.basename(folder) != "lib-dynload":
            continue
        for suffix in _imp.extension_suffixes():
            path = os.path.join(folder, "_ctypes" + suffix)
            if os.path.isfile(path):
                with bootstrap._ModuleLockManager("_ctypes"):  # the program's import may race ours
                    return sys.modules.get("_ctypes") or \
                        bootstrap._load_unlocked(external.spec_from_file_location("_ctypes", path))
    return None


def in_one_call(c, make, args, count=1):
    """make(*args), a libc call through c.keep that makes `count` new descriptors (returned, or for
    count 2 written into args[0], as pipe2 does), then each one's duplicate at FLOOR or up and the
    close of the low one: (make's result, its errno, [high duplicates or -1]). All of it in one C
    call: zip pulls lazy maps, so no Python bytecode runs in between, the GIL is never let go, and
    no Python code of the program (which could close a stale number, the new one) runs while a
    low number is ours. A failed make leaves -1s: fcntl and close of -1 do nothing."""
    import itertools
    for floor in (FLOOR, LOW_FLOOR):  # LOW_FLOOR where the open-files limit is at or under FLOOR
        made = itertools.starmap(make, [args])
        if count == 1:
            first, low_a, low_b = itertools.tee(made, 3)
            lows = [(low_a, low_b)]
        else:
            first, ends = made, args[0]
            lows = [(map(ends.__getitem__, [i]), map(ends.__getitem__, [i])) for i in range(count)]
        steps = [first, itertools.starmap(c.get_errno, [()])]
        for low_a, low_b in lows:
            steps += [map(c.keep.fcntl, low_a, [F_DUPFD_CLOEXEC], [floor]), map(c.keep.close, low_b)]
        done = next(zip(*steps))  # the one C call
        result, err, highs = done[0], done[1], list(done[2::2])
        if result < 0 or min(highs) >= 0:
            return result, err, highs
        for high in highs:
            if high >= 0:
                os.close(high)
        if count == 2:
            args[0][0] = args[0][1] = -1
    return result, 24, highs  # EMFILE: no number free up there


def made(c, make, args, what=None):
    """The high descriptor that make(*args) made (see in_one_call); raises OSError."""
    result, err, highs = in_one_call(c, make, args)
    if result < 0 or highs[0] < 0:
        raise OSError(err, os.strerror(err), what) if what else OSError(err, os.strerror(err))
    return highs[0]


def read_all(fd, limit=1 << 62):
    chunks, size = [], 0
    while size < limit:
        chunk = os.pread(fd, min(65536, limit - size), size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_module(c, path):
    """A module file's bytes (importlib's get_data), opened in one C call: for the load of fds
    itself (fds.read_file, which first asks whether a path may be opened with the GIL held, serves
    the rest). Raises OSError."""
    fd = made(c, c.keep.open, (os.fsencode(path), os.O_RDONLY | os.O_CLOEXEC), path)
    try:
        return read_all(fd)
    finally:
        os.close(fd)
