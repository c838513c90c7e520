"""The start pack: the start path's modules as one file of their code objects, opened and
checked once instead of each found, stat-ed, read and checked on its own (how CPython freezes its
own start-up modules; docs/design.md#the-start-pack). It owns the pack's format, where it lives,
starting earlylog through it, its second stage (LATER: modules made from the pack at their first
import, this module being their path entry finder), and writing it: at `earlylog install` by
compiling the sources in the target interpreter (build), and at a start that found it missing,
stale or bad from the .pyc files the import system has just written (at_start), to a temporary
name renamed into place. Every entry point (.pth line, start file, sitecustomize) calls start().
A pack is trusted only past its checks: this interpreter's magic number and cache tag, a keyed
hash of all it holds, and per module the source's mtime and size; any mismatch, corruption or
error means the normal import for that module (or all), and a rebuild. At start-up it never
raises and prints nothing of its own; it compiles only in a rebuild, a LATER module that has no
.pyc yet; it imports nothing of ours: it loads by normal import, ahead of the pack."""
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
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)  # the earlylog package's folder
# What the last start() did (tests read it): "used", "stale", "missing", "bad" or "off"
outcome = None


def path():
    """This interpreter's pack: beside the runtime's own .pyc files, named like them (cache tag,
    optimization level; under sys.pycache_prefix if set), so that each Python and each -O level
    has its own. Raises NotImplementedError where this Python writes no .pyc files at all."""
    return _external.cache_from_source(os.path.join(HERE, "startpack.py"))[:-4] + ".pack"


def key():
    """What a pack's bytes are hashed with: the import system's own keyed hash (hash-based .pyc
    files use it), keyed by this interpreter's magic number."""
    return _external._RAW_MAGIC_NUMBER


def header(body):
    return _external.MAGIC_NUMBER + FORMAT + _imp.source_hash(key(), body)


def source(name):
    """The source file of a MODULES name ("runtime.boot", "grammar")."""
    path = os.path.join(TOP, *name.split("."))
    return os.path.join(path, "__init__.py") if name in _PACKAGES else path + ".py"


class PackedLoader(_external.SourceFileLoader):
    """The loader of a module that came from the pack: the import system's own source loader
    (so get_source, get_code, inspect, linecache and runpy read the real file, as for any module),
    under a name of its own that says where the module came from. A LATER module's loader holds
    its marshalled code until the import system asks for it, once."""
    code = None

    def get_code(self, fullname):
        data, self.code = self.code, None
        if data is None:
            return super().get_code(fullname)
        code = marshal.loads(data)
        _imp._fix_co_filename(code, self.path)
        return code


# The pack's second stage (LATER): this module is its path entry finder. It sits in
# sys.path_importer_cache under the pack's own path, first on the runtime's and the grammar's
# __path__ (an absolute path and no folder: were the cache cleared, a path hook finds nothing there), and gives
# the import system a LATER module's spec at its first import, its code from the pack's bytes, so
# that the import's locks, spec and attributes are the import system's own and no file is opened.
# A module, not a class: each class made at start-up costs every process 0.07 to 0.13 M instructions.
_later = {}  # {full name: (source mtime_ns, size, marshalled code)} of LATER modules not imported yet


def find_spec(fullname, target=None):
    """The spec of a LATER module not imported yet whose source is unchanged, else None. Each entry
    is given once (a module whose load failed then imports from its file as usual), and its bytes
    go with it."""
    entry = _later.pop(fullname, None)
    if entry is None:
        return None
    filename = source(fullname[len(PACKAGE):])
    try:
        st = os.stat(filename)
    except OSError:
        return None
    if st.st_mtime_ns != entry[0] or st.st_size != entry[1]:
        return None
    loader = PackedLoader(fullname, filename)
    loader.code = entry[2]
    spec = _bootstrap.ModuleSpec(fullname, loader, origin=filename)
    spec.has_location = True
    return spec


def invalidate_caches():
    """importlib.invalidate_caches() asks every path entry finder: nothing here goes stale."""


def _load(pack):
    """Run the pack's modules into sys.modules, in MODULES order (each after those it imports), as
    the import system would: the same module attributes, spec and parent attribute, without its
    finders, locks and file reads. A module whose source changed, or that fails, is left to the
    normal import (a module that imports it gets it that way). True if all were current."""
    folder, _, own = path()[:-len(".pack")].rpartition(os.sep)  # .../__pycache__, startpack.<tag>
    folder, tail = folder + os.sep, own[len("startpack"):] + ".pyc"
    current, entries = True, pack[0]
    for short in MODULES:
        name = PACKAGE + short
        entry = entries.get(name)
        if entry is None or name in sys.modules:
            current = current and entry is not None
            continue
        filename = source(short)
        try:
            st = os.stat(filename)
        except OSError:
            st = None
        parent_name, _, leaf = name.rpartition(".")
        parent = sys.modules.get(parent_name)
        if st is None or st.st_mtime_ns != entry[0] or st.st_size != entry[1] or parent is None:
            current = False
            continue
        package = short in _PACKAGES
        loader = PackedLoader(name, filename)
        spec = _bootstrap.ModuleSpec(name, loader, origin=filename, is_package=package)
        spec.has_location = True
        module = type(sys)(name)
        module.__file__, module.__loader__ = filename, loader
        # The runtime's .pyc files sit beside the pack (the one folder path() found); the grammar's
        # two are asked of the import system.
        module.__cached__ = folder + leaf + tail if short.startswith("runtime.") else \
            _external.cache_from_source(filename)
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


def _unpack(data):
    """(entries, later) of a pack's bytes that checked out: entries {full name: (source mtime_ns,
    source size, code object)}, later {full name: (mtime_ns, size, that module's own marshalled
    code)}, made only when imported. The start modules' code is one marshalled tuple: names and
    constants the modules share are made once (a marshalled object per module cost a start 0.67 M
    more instructions). Raises ValueError where they do not check out."""
    if data[:_HASHED - 8] != _external.MAGIC_NUMBER + FORMAT:
        raise ValueError("another interpreter's pack, or not a pack")
    body = memoryview(data)[_HASHED:]
    if data[:_HASHED] != header(body):
        raise ValueError("damaged")
    tag, optimize, sources, codes, later = marshal.loads(body)
    if tag != sys.implementation.cache_tag or optimize != sys.flags.optimize:
        raise ValueError("another interpreter's pack")
    return ({PACKAGE + name: (mtime, size, code) for (name, mtime, size), code in zip(sources, codes)},
            {PACKAGE + name: (mtime, size, marshalled) for name, mtime, size, marshalled in later})


def read(filename):
    """The pack at filename, unpacked (_unpack), if it is this interpreter's and intact; None if there is none; raises
    ValueError (or OSError, EOFError, TypeError) if it is bad."""
    try:
        fd = os.open(filename, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, _MAX)  # a regular file: one read returns it whole
    finally:
        os.close(fd)
    return _unpack(data)


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
            at_start()
    except BaseException as exc:  # never let an exception reach the application
        _say("could not load (%r); the program runs without it" % (exc,))


def _open():
    """Load what the pack holds; says how it went: used, stale, missing, bad or off."""
    if sys.flags.optimize or sys.implementation.cache_tag is None:
        return "off"  # -O and -OO runs are rare: they import as usual, and build nothing
    try:
        pack = read(path())
    except Exception:
        return "bad"
    if pack is None:
        return "missing"
    try:
        current = _load(pack)
        later = pack[1]
        if later:
            _later.update(later)
            sys.path_importer_cache[path()] = sys.modules[__name__]
            for package in (PACKAGE + "runtime", PACKAGE + "grammar"):  # where LATER's modules live
                searched = getattr(sys.modules.get(package), "__path__", None)
                if isinstance(searched, list):
                    searched.insert(0, path())
        return "used" if current and len(later) == len(LATER) else "stale"
    except Exception:
        return "bad"


def _say(sentence):
    try:
        sys.stderr.write("earlylog: %s\n" % sentence)
    except Exception:
        pass


# Writing the pack: only at a start that found it missing, stale or bad, and at `earlylog install`.

def at_start():
    """Rebuild the pack from what is on disk now; True if it was written."""
    try:
        target = path()
        if not os.access(os.path.dirname(target), os.W_OK):
            return False  # one syscall where the folder is read-only: such a start imports as usual
        try:
            old = read(target)
        except Exception:
            old = None
        current = _current(old)
        if current is None:
            return False
        write(target, *current)
        return True
    except Exception:
        return False


def _current(old):
    """(entries, later) for write(), from what is on disk now: per module the old pack's entry if
    its source is unchanged, else its .pyc's code; a LATER module with no .pyc yet is compiled (it
    may never have been imported: compiled here, at a start that rebuilds the pack, not at every
    start that would find it missing). None where a start module's .pyc is not written yet: a
    later start builds it."""
    entries, later = [], []
    for name in MODULES + LATER:
        filename = source(name)
        st = os.stat(filename)
        stage = name in LATER  # old[1], LATER's entries, hold their code marshalled
        entry = old[stage].get(PACKAGE + name) if old is not None else None
        if entry is not None and entry[:2] == (st.st_mtime_ns, st.st_size):
            code = entry[2]
        else:
            code = _from_pyc(name, st)
            if code is None and not stage:
                return None
            if code is None:
                with open(filename, "rb") as f:
                    code = compile(f.read(), filename, "exec", dont_inherit=True)
            if stage:
                code = marshal.dumps(code)
        (later if stage else entries).append((name, st.st_mtime_ns, st.st_size, code))
    return entries, later


def _from_pyc(name, st):
    """The code in the module's .pyc if it is this interpreter's and the import system would take
    it for this source (timestamp-checked: its mtime and size), else None."""
    try:
        with open(_external.cache_from_source(source(name)), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if data[:4] != _external.MAGIC_NUMBER or data[4:8] != b"\0\0\0\0" or \
            data[8:12] != (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") or \
            data[12:16] != (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"):
        return None
    try:
        return marshal.loads(memoryview(data)[16:])
    except (ValueError, EOFError, TypeError):
        return None


def build():
    """Compile the start path's sources in this interpreter and write its pack (`earlylog install`
    runs this in the interpreter it installs into); returns the pack's path. Raises OSError."""
    target = path()
    entries = []
    for name in MODULES + LATER:
        filename = source(name)
        with open(filename, "rb") as f:
            st = os.fstat(f.fileno())
            text = f.read()
        entries.append((name, st.st_mtime_ns, st.st_size, compile(text, filename, "exec", dont_inherit=True)))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    write(target, entries[:len(MODULES)], [entry[:3] + (marshal.dumps(entry[3]),) for entry in entries[len(MODULES):]])
    return target


def write(target, entries, later):
    """The pack: magic number, format, the hash of the body, then the body: one marshalled tuple of
    the cache tag, optimization level, per module its name, source mtime and size, the modules'
    code objects, and LATER's entries. entries: (name, mtime_ns, size, code object) in MODULES
    order; later: (name, mtime_ns, size, marshalled code) in LATER order."""
    body = marshal.dumps((sys.implementation.cache_tag, sys.flags.optimize,
                          tuple((name, mtime, size) for name, mtime, size, _code in entries),
                          tuple(code for _name, _mtime, _size, code in entries), tuple(later)))
    data = header(body) + body
    tmp = "%s.%d.tmp" % (target, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
