"""The side of earlylog that runs inside other people's processes when EARLYLOG is set.
Standard library only, Python 3.9+; nothing here may raise into the program, block it, or import
earlylog.read or earlylog.cli. boot.py lists the start's steps in order.

This package's own module is how a start loads it: the start pack's reader. The pack holds the
start path's modules as one file of their code objects, opened and checked once instead of each
found, stat-ed, read and checked on its own (how CPython freezes its own start-up modules;
docs/design.md#the-start-pack). Every entry point (.pth line, start file, sitecustomize) imports
this package, the one module of the runtime the import system finds at start, and calls start().
It owns the pack's format, where it lives, loading it, and its second stage (LATER: modules made
from the pack at their first import, this module being their path entry finder); startpack.py
writes it. A pack is trusted only past its checks: this interpreter's magic number and cache tag,
a keyed hash of all it holds (unless the file's own mtime and size are the ones its writer gave
it), and per module the source's mtime and size; any mismatch, corruption or error means the
normal import for that module (or all), and a rebuild. At start-up it never raises and prints
nothing of its own; it imports nothing of ours."""
import _imp
import marshal
import os
import sys

import _frozen_importlib as _bootstrap  # the import system's own, loaded in every process
import _frozen_importlib_external as _external

PACKAGE = "earlylog."
# The modules every start loads before the program's first line (the runtime's, and the log's
# grammar it writes through), each after the ones it imports at its top (tests/test_startpack.py
# checks both against the source and a real process). The watchdog's module loads in its own
# thread, after start-up (docs/design.md#the-watchdog-loads-in-its-thread).
MODULES = ("runtime.state", "grammar", "grammar.records", "runtime.identity", "runtime.sinks",
           "runtime.config", "runtime.redact", "runtime.hooks", "runtime.imports",
           "runtime.stdio", "runtime.threads", "runtime.fault", "runtime.boot")
_PACKAGES = ("grammar",)  # of MODULES, the packages (an __init__.py)
# The pack's second stage: modules no start needs before the program's first line, made from the
# pack only when first imported (by the program's thread or ours), through a finder on the runtime's
# and the grammar's __path__ (docs/design.md#the-start-pack). libc among them: our threads' first
# import binds it, and it must come from no file (a file would open at a low number); places: an
# exit call's record reads it in the program's thread as it ends.
LATER = ("runtime.libc", "runtime.phases", "runtime.raised", "grammar.places")
FORMAT = b"earlylog startpack 6\n"
_HASHED = len(_external.MAGIC_NUMBER) + len(FORMAT) + 8  # magic, format, hash: then the hashed body
_MAX = 4 << 20  # a pack is about 250 KB: never allocate what a bad file's size says
# The mtime its writer gives a pack (1980-01-01, the ZIP epoch): a pack that still has it, and the
# size it was written with, was changed by nothing since, and is trusted as the import system
# trusts a .pyc, without hashing its bytes (0.7 M instructions, 1.8% of a start). Any write to it,
# a damaged or truncated copy included, gives it a new mtime, and then the hash decides.
WRITTEN_NS = 315532800 * 10 ** 9
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)  # the earlylog package's folder
# What the last start() did (tests read it): "used", "stale", "missing", "bad" or "off"
outcome = None


def path():
    """This interpreter's pack: beside the runtime's own .pyc files, named like them (cache tag,
    optimization level; under sys.pycache_prefix if set), so that each Python and each -O level
    has its own. Raises NotImplementedError where this Python writes no .pyc files at all."""
    return _external.cache_from_source(HERE + os.sep + "startpack.py")[:-4] + ".pack"


def header(body):
    """The pack's first bytes for this body: its hash is the import system's own keyed hash (hash-based
    .pyc files use it), keyed by this interpreter's magic number."""
    return _external.MAGIC_NUMBER + FORMAT + _imp.source_hash(_external._RAW_MAGIC_NUMBER, body)


def source(name):
    """The source file of a MODULES or LATER name ("runtime.boot", "grammar"). Joined by hand: a
    start asks for 13, and os.path.join is Python code."""
    path = TOP + os.sep + name.replace(".", os.sep)
    return path + os.sep + "__init__.py" if name in _PACKAGES else path + ".py"


# A module that came from the pack has the import system's own source loader (so get_source,
# get_code, inspect, linecache and runpy read the real file, as for any module), and this as its
# spec's loader_state, which says where it came from. A LATER module's loader also holds its
# marshalled code until the import system asks for it, once: a class of its own, made at the first
# LATER import (each class made at start-up costs every process 0.07 to 0.13 M instructions).
PACKED = "earlylog start pack"
_later_loader = []  # [that class], once made


def _loader(fullname, filename, code):
    if not _later_loader:
        class PackedLoader(_external.SourceFileLoader):
            code = None

            def get_code(self, fullname):
                data, self.code = self.code, None
                if data is None:
                    return super().get_code(fullname)
                code = marshal.loads(data)
                _imp._fix_co_filename(code, self.path)
                return code
        _later_loader.append(PackedLoader)
    loader = _later_loader[0](fullname, filename)
    loader.code = code
    return loader


# The pack's second stage (LATER): this module is its path entry finder. It sits in
# sys.path_importer_cache under the pack's own path, first on the runtime's and the grammar's
# __path__ (an absolute path and no folder: were the cache cleared, a path hook finds nothing there), and gives
# the import system a LATER module's spec at its first import, its code from the pack's bytes, so
# that the import's locks, spec and attributes are the import system's own and no file is opened.
# A module, not a class (see PACKED).
_later = {}  # {full name: (source mtime_ns, size, marshalled code)} of LATER modules not imported yet


def find_spec(fullname, target=None):
    """The spec of a LATER module not imported yet whose source is unchanged, else None. Each entry
    is given once (a module whose load failed then imports from its file as usual), and its bytes
    go with it."""
    entry = _later.pop(fullname, None)
    if entry is None:
        return None
    filename = source(fullname[len(PACKAGE):])
    if not _unchanged(filename, entry):
        # An edited LATER module: it imports from its file, and the next start, finding no pack,
        # builds one. Checked here, at its import, not at every start (a start checks its own).
        try:
            os.unlink(path())
        except OSError:
            pass
        return None
    spec = _bootstrap.ModuleSpec(fullname, _loader(fullname, filename, entry[2]), origin=filename,
                                 loader_state=PACKED)
    spec.has_location = True
    return spec


def _unchanged(filename, entry):
    """Is the source the pack's entry (mtime_ns, size, ...) was made from still what is on disk?"""
    try:
        st = os.stat(filename)
    except OSError:
        return False
    return st.st_mtime_ns == entry[0] and st.st_size == entry[1]


def _load(pack, where):
    """Run the pack's modules into sys.modules, in MODULES order (each after those it imports), as
    the import system would: the same module attributes, spec and parent attribute, without its
    finders, locks and file reads. A module whose source changed, or that fails, is left to the
    normal import (a module that imports it gets it that way). True if all were current."""
    folder, _, own = where[:-len(".pack")].rpartition(os.sep)  # .../__pycache__, startpack.<tag>
    # The .pyc files' folders: the runtime's holds the pack (the one folder path() asked of the
    # import system); the grammar's is named alike, sys.pycache_prefix or not.
    cut = folder.rfind(os.sep + "runtime") + 1
    folders = {"runtime": folder + os.sep, "grammar": folder[:cut] + "grammar" + folder[cut + 7:] + os.sep}
    tail = own[len("startpack"):] + ".pyc"
    current, entries = True, pack[0]
    for short in MODULES:
        name = PACKAGE + short
        entry = entries.get(short)
        if entry is None or name in sys.modules:
            current = current and entry is not None
            continue
        filename = source(short)
        parent_name, _, leaf = name.rpartition(".")
        parent = sys.modules.get(parent_name)
        if parent is None or not _unchanged(filename, entry):
            current = False
            continue
        package = short in _PACKAGES
        loader = _external.SourceFileLoader(name, filename)
        spec = _bootstrap.ModuleSpec(name, loader, origin=filename, loader_state=PACKED, is_package=package)
        spec.has_location = True
        module = type(sys)(name)
        module.__file__, module.__loader__ = filename, loader
        module.__cached__ = folders[short.partition(".")[0]] + (leaf + tail if not package else "__init__" + tail)
        module.__package__, module.__spec__ = name if package else parent_name, spec
        if package:
            spec.submodule_search_locations = module.__path__ = [os.path.dirname(filename)]
        sys.modules[name] = module
        try:
            code = entry[2]
            _imp._fix_co_filename(code, filename)  # as for a .pyc: a moved folder keeps tracebacks right
            exec(code, module.__dict__)
        except Exception:
            if sys.modules.get(name) is module:
                del sys.modules[name]
            return False  # the rest import as usual
        setattr(parent, leaf, module)
    return current


def read(filename):
    """The pack at filename if it is this interpreter's and intact, as (entries, later): entries
    {MODULES name: (source mtime_ns, source size, code object)}, later {full name: (mtime_ns, size,
    that module's own marshalled code)}, made only when imported; None if there is none. Raises
    ValueError (or OSError, EOFError, TypeError) if it is bad. The start modules' code is one
    marshalled tuple: names and constants the modules share are made once (a marshalled object per
    module cost a start 0.67 M more instructions). The hash is checked unless the file still has
    the mtime and size its writer gave it (WRITTEN_NS)."""
    try:
        fd = os.open(filename, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, _MAX)  # a regular file: one read returns it whole
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if data[:_HASHED - 8] != _external.MAGIC_NUMBER + FORMAT:
        raise ValueError("another interpreter's pack, or not a pack")
    body = memoryview(data)[_HASHED:]
    if (st.st_mtime_ns != WRITTEN_NS or st.st_size != len(data)) and data[:_HASHED] != header(body):
        raise ValueError("damaged")
    tag, optimize, sources, codes, later = marshal.loads(body)
    if tag != sys.implementation.cache_tag or optimize != sys.flags.optimize:
        raise ValueError("another interpreter's pack")
    return ({name: (mtime, size, code) for (name, mtime, size), code in zip(sources, codes)},
            {PACKAGE + name: (mtime, size, marshalled) for name, mtime, size, marshalled in later})


def start(origin):
    """Start earlylog (boot.start) with the pack's modules, then rebuild the pack if it was
    missing, stale or bad. Never raises: any problem leaves the normal imports."""
    global outcome
    try:
        started = sys.modules.get(PACKAGE + "runtime.state")
        if started is not None and started.pid == os.getpid():
            return  # a venv runs .pth lines twice; .pth and sitecustomize may both fire
        outcome = _open()
        from earlylog.runtime import boot
        boot.start(origin)
        if outcome not in ("used", "off") and not sys.dont_write_bytecode and \
                all(PACKAGE + name in sys.modules for name in MODULES):
            from earlylog.runtime import startpack
            startpack.at_start()
    except BaseException as exc:  # never let an exception reach the application
        try:
            sys.stderr.write("earlylog: could not load (%r); the program runs without it\n" % (exc,))
        except Exception:
            pass


def _open():
    """Load what the pack holds; says how it went: used, stale, missing, bad or off."""
    if sys.flags.optimize or sys.implementation.cache_tag is None:
        return "off"  # -O and -OO runs are rare: they import as usual, and build nothing
    where = path()
    try:
        pack = read(where)
    except Exception:
        return "bad"
    if pack is None:
        return "missing"
    try:
        current = _load(pack, where)
        later = pack[1]
        if later:
            _later.update(later)
            sys.path_importer_cache[where] = sys.modules[__name__]
            for package in (PACKAGE + "runtime", PACKAGE + "grammar"):  # where LATER's modules live
                searched = getattr(sys.modules.get(package), "__path__", None)
                if isinstance(searched, list):
                    searched.insert(0, where)
        return "used" if current and len(later) == len(LATER) else "stale"
    except Exception:
        return "bad"

