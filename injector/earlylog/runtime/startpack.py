"""Writing the start pack that earlylog.runtime reads (docs/design.md#the-start-pack): at
`earlylog install` by compiling the sources in the target interpreter (build), and at a start that
found it missing, stale or bad from the .pyc files the import system has just written (at_start),
to a temporary name renamed into place, its mtime set to the one the reader trusts without hashing.
It is imported only to write: a start that finds its pack current never loads it. It compiles only
in a rebuild, a LATER module that has no .pyc yet, and never raises out of at_start()."""
import marshal
import os
import sys

import _frozen_importlib_external as _external

from earlylog.runtime import LATER, MODULES, PACKAGE, WRITTEN_NS, header, path, read, source


def start(origin):
    """The entry point of the .pth lines earlylog 0.3.2 and older wrote (`startpack.start(ORIGIN)`):
    such a line, left where a newer earlylog is found first (PYTHONPATH's runtime copy ahead of a
    venv's older install), starts it as the new line does, through earlylog.runtime."""
    from earlylog import runtime
    runtime.start(origin)


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
        stage = name in LATER  # old[1], LATER's entries, hold their code marshalled, by full name
        entry = old[stage].get(PACKAGE + name if stage else name) if old is not None else None
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
        try:
            os.utime(tmp, ns=(WRITTEN_NS, WRITTEN_NS))  # the mark the reader trusts without hashing
        except OSError:
            pass  # a folder that keeps no such time: every start hashes the pack
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
