"""Every descriptor the runtime's threads and its exit path make (opens, folder listings, duplicates,
pipes, sockets), at FLOOR and up (runtime/libc.py), never at a number the program may reuse
(docs/design.md#our-fds-sit-high). A program that closes a stale number (a double close) must never
close one of ours, and we must never close a number the program may since have taken: a kernel
gives every new descriptor the lowest free number, so ours would be the very one just freed.
- Files read again and again (the watchdog's /proc/self/... files, cgroup counters) are opened once
  per process (keep=True) and re-read with os.pread; a fork child opens its own.
- A new descriptor (an open, pipe, memfd, socket) is made by libc with the GIL held and moved up in
  the same C call (libc.in_one_call): no Python code of the program runs between the making and
  the close of its low number. Modules our threads import are read the same way (imports.py), and
  so are source files for dumps (getlines, not linecache).
- A duplicate of a program's fd is made high by the kernel (F_DUPFD_CLOEXEC): no low number at all.
- A folder is listed with getdents64 on a high descriptor: os.listdir and os.scandir open and close
  a low one, and let the program run in between.
Without libc (not Linux, no _ctypes), and for a path that may be slow to open (on a network
filesystem, or no plain file or folder: the GIL must not wait on it), the low number is closed only
once a check says it still names what we opened (docs/design.md#our-fds-sit-high says what window
remains). It imports nothing at module level but os, sys and libc; never on the start path."""
import os
import sys

from earlylog.runtime import libc

MAX_KEPT = 64         # descriptors kept open for re-reading; past it a file is opened for each read
MAX_SOURCES = 64      # source files getlines keeps where the program has not imported linecache
# Filesystems whose open may wait on a server or another process: opened with the GIL let go.
REMOTE = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "lustre", "gpfs", "9p", "afs", "glusterfs",
          "beegfs", "ncpfs", "coda", "davfs", "sshfs")
_mounts = {}          # pid -> {(major, minor): filesystem type} from /proc/self/mountinfo
_FAST = ("/proc/", "/sys/", "/dev/")  # in-memory filesystems: an open never waits, so it may keep the GIL
_kept = {}            # path -> descriptor, opened by the process _kept_pid names
_kept_pid = [None]


def dup(fd):
    """A close-on-exec duplicate of fd (a program's, say) at FLOOR or up, made by the kernel there:
    no low number at any moment. Raises OSError."""
    import fcntl
    try:
        return fcntl.fcntl(fd, libc.F_DUPFD_CLOEXEC, libc.FLOOR)
    except OSError as exc:
        if exc.errno != 22:  # EINVAL: FLOOR is past the open-files limit
            raise
        return fcntl.fcntl(fd, libc.F_DUPFD_CLOEXEC, libc.LOW_FLOOR)


def _identity(st):
    return st.st_dev, st.st_ino


def _lift_checked(low, want):
    """The high duplicate of our new low descriptor, made without libc: the low one is closed only
    while it still names want ((device, inode) of what we made), never once the program closed it
    and took its number; the short window between that check and the close remains."""
    try:
        high = dup(low)
    except OSError:
        if _identity(os.fstat(low)) == want:
            os.close(low)
        raise
    try:
        ours = _identity(os.fstat(high)) == want
    except OSError:
        ours = False
    if not ours:  # the program closed our number and opened its own there: ours is gone already
        os.close(high)
        raise OSError(9, "the program closed it")
    try:
        if _identity(os.fstat(low)) == want:
            os.close(low)
    except OSError:
        pass
    return high


def _local(dev):
    """Is device dev's filesystem a local one (ext4, xfs, overlay, tmpfs...)? Unknown: no."""
    key = os.major(dev), os.minor(dev)
    types = _mounts.get(os.getpid())
    if types is None or key not in types:
        types = _mounts[os.getpid()] = {}
        for line in (read("/proc/self/mountinfo") or b"").decode("utf-8", "replace").splitlines():
            fields, _, rest = line.partition(" - ")
            fields, rest = fields.split(), rest.split()
            if len(fields) > 2 and rest and ":" in fields[2]:
                major, _, minor = fields[2].partition(":")
                if major.isdigit() and minor.isdigit():
                    types[int(major), int(minor)] = rest[0]
    kind = types.get(key)
    return kind is not None and kind not in REMOTE and not kind.startswith("fuse")


def open(path, flags=os.O_RDONLY):
    """A descriptor on path at FLOOR or up (close-on-exec; the caller closes it). Raises OSError."""
    flags |= os.O_CLOEXEC
    c, st = libc.bound(), None
    if c is not None and not path.startswith(_FAST):
        # Elsewhere an open may wait (a FIFO for a writer, a network filesystem for its server):
        # with the GIL held only a plain file or folder on a local filesystem.
        import stat
        st = os.stat(path)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) or not _local(st.st_dev):
            c = None
        flags |= os.O_NONBLOCK  # no wait on a device or FIFO put there since the stat
    if c is not None:
        return libc.made(c, c.keep.open, (os.fsencode(path), flags), path)
    want = _identity(st or os.stat(path))
    return _lift_checked(os.open(path, flags), want)


def pipe():
    """(read end, write end), both at FLOOR or up and close-on-exec. Raises OSError."""
    c = libc.bound()
    if c is None:
        r, w = os.pipe()
        want_r, want_w = _identity(os.fstat(r)), _identity(os.fstat(w))
        try:
            high_r = _lift_checked(r, want_r)
        except OSError:
            os.close(_lift_checked(w, want_w))
            raise
        try:
            return high_r, _lift_checked(w, want_w)
        except OSError:
            os.close(high_r)
            raise
    ends = (c.c_int * 2)(-1, -1)  # -1s, never 0 and 1, if pipe2 fails
    result, err, highs = libc.in_one_call(c, c.keep.pipe2, (ends, os.O_CLOEXEC), 2)
    if result < 0 or min(highs) < 0:
        raise OSError(err, os.strerror(err))
    return highs[0], highs[1]


def memfd(name):
    """An anonymous file (memfd_create) at FLOOR or up, close-on-exec. Raises OSError."""
    c = libc.bound()
    if c is None or not hasattr(c.keep, "memfd_create"):
        low = os.memfd_create(name, os.MFD_CLOEXEC)
        return _lift_checked(low, _identity(os.fstat(low)))
    return libc.made(c, c.keep.memfd_create, (os.fsencode(name), 1))  # MFD_CLOEXEC


def socket(family, kind):
    """A new socket.socket(family, kind) whose descriptor sits at FLOOR or up. Raises OSError."""
    import socket as _socket
    c = libc.bound()
    if c is None:
        low = _socket.socket(family, kind).detach()
        fd = _lift_checked(low, _identity(os.fstat(low)))
    else:
        fd = libc.made(c, c.keep.socket, (int(family), int(kind) | 0o2000000, 0))  # SOCK_CLOEXEC
    try:
        return _socket.socket(family, kind, fileno=fd)
    except (OSError, ValueError):
        os.close(fd)
        raise


def socket_of(fd):
    """A socket.socket on a high duplicate of a program's socket fd (closing it leaves fd alone),
    for getsockopt and its peers. Raises OSError."""
    import _socket
    high = dup(fd)
    try:
        return _socket.socket(fileno=high)
    except (OSError, ValueError):
        os.close(high)
        raise


def _kept_fd(path):
    """The kept descriptor on path, opened on first use; None once MAX_KEPT are open."""
    pid = os.getpid()
    if _kept_pid[0] != pid:
        # A fork child: /proc/self/... opened by the parent names the parent. The copies are ours
        # (high numbers, inherited), so closing them here is safe.
        for fd in _kept.values():
            try:
                os.close(fd)
            except OSError:
                pass
        _kept.clear()
        _kept_pid[0] = pid
    fd = _kept.get(path)
    if fd is None and len(_kept) < MAX_KEPT:
        fd = _kept[path] = open(path)
    return fd


def _drop(path):
    fd = _kept.pop(path, None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def read(path, limit=1 << 20, keep=False):
    """The first `limit` bytes of a file, or None when it cannot be read. keep: a file read again
    and again (it stays open, and a thread's file that fails, the thread gone, is opened afresh
    once: its id may be a new thread's)."""
    if keep:
        for _attempt in (1, 2):
            try:
                fd = _kept_fd(path)
            except OSError:
                return None
            if fd is None:
                break  # MAX_KEPT reached: read it the short way
            try:
                return libc.read_all(fd, limit)
            except OSError:
                _drop(path)
        else:
            return None
    try:
        fd = open(path)
    except OSError:
        return None
    try:
        return libc.read_all(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def tail(path, limit):
    """The last `limit` bytes of a file (a child's log), or None when it cannot be read."""
    try:
        fd = open(path)
    except OSError:
        return None
    try:
        start = max(0, os.fstat(fd).st_size - limit)
        return os.pread(fd, limit, start)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_file(path):
    """The whole file's bytes, as importlib's loaders read a module (their get_data); raises OSError."""
    fd = open(path)
    try:
        return libc.read_all(fd)
    finally:
        os.close(fd)


def forget(folder, names):
    """Close the kept descriptors under folder/<name>/ for every name not in names (threads gone)."""
    prefix = folder.rstrip("/") + "/"
    for path in [p for p in _kept if p.startswith(prefix)]:
        if path[len(prefix):].partition("/")[0] not in names:
            _drop(path)


def listdir(path):
    """os.listdir(path) through a high descriptor (getdents64). Raises OSError as os.listdir does."""
    c = libc.bound()
    if c is None or c.getdents64 is None:
        return os.listdir(path)
    fd = open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return _names(c, fd, path)
    finally:
        os.close(fd)


def _names(c, fd, path):
    """The names in the folder open at fd (ours, high), read with getdents64: os.listdir and
    os.scandir open and close a low descriptor and let the program run in between. Raises OSError
    as os.listdir does."""
    size = 32768
    buf = c.buffer(size)
    found = []
    while True:
        n = c.free.syscall(c.getdents64, fd, buf, size)  # lets the GIL go: fd is ours, high
        if n < 0:
            code = c.get_errno()
            raise OSError(code, os.strerror(code), path)
        if n == 0:
            return found
        raw, pos = buf.raw[:n], 0
        while pos < n:
            reclen = int.from_bytes(raw[pos + 16:pos + 18], sys.byteorder)
            name = raw[pos + 19:raw.index(b"\0", pos + 19)]
            if name not in (b".", b".."):
                found.append(os.fsdecode(name))
            pos += reclen


def write_file(c, path, data, mode=0o666):
    """importlib's _write_atomic (a .pyc into the cache) through a high descriptor: a temporary file
    beside it, renamed into place. Raises OSError."""
    tmp = "%s.%d" % (path, id(path))
    flags = os.O_EXCL | os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC
    fd = libc.made(c, c.keep.open, (os.fsencode(tmp), flags, mode & 0o666), tmp)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# The import system, for our threads (imports.own_threads installs these): it opens a module's
# files and lists a sys.path folder at the lowest free number and lets the program run meanwhile.
_FILE_LOADERS = ("SourceFileLoader", "SourcelessFileLoader")


def loader_high(spec, c):
    """Set get_data and set_data on this import's own loader (a finder makes one per spec) so that
    its files are read and its .pyc written through high descriptors; the import hook takes them
    away after the load, so the module's __loader__ is as it would be. Returns that loader, or None
    (another kind of loader)."""
    loader = spec.loader
    if type(loader).__name__ not in _FILE_LOADERS or type(loader).__module__ != "_frozen_importlib_external" \
            or "get_data" in vars(loader):
        return None
    loader.get_data = read_file
    loader.set_data = lambda path, data, _mode=0o666: cache(c, path, data, _mode)
    return loader


def cache(c, path, data, mode):
    """SourceFileLoader.set_data: the .pyc written high, its folder made as importlib would; a
    failure is ignored, as importlib ignores it (the cache is only a cache)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file(c, path, data, mode)
    except OSError:
        pass


def fill_cache(finder):
    """FileFinder._fill_cache for a thread of ours: the folder listed through a high descriptor
    (listdir). False where that cannot be done (importlib's own then lists it). Linux only, where
    importlib keeps the names as they are (no case folding)."""
    try:
        finder._path_cache = set(listdir(finder.path or os.getcwd()))
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        finder._path_cache = set()  # as importlib: the folder gone, unreadable, or not one
    except Exception:
        return False
    return True


def getlines(filename):
    """linecache.getlines(filename), the file read through a high descriptor: linecache opens it at
    the lowest free number and lets the program run until it closes it. Fills linecache's cache as
    linecache.updatecache would (the program's tracebacks share it) where the program has imported
    linecache, else a cache of our own: importing linecache imports tokenize and re, and those
    enum, functools and collections, most of a megabyte for a small process. [] where it cannot."""
    linecache = sys.modules.get("linecache")
    cache = linecache.cache if linecache is not None else _lines
    entry = cache.get(filename)
    if entry is not None and len(entry) != 1:  # a 1-tuple is a lazy entry: linecache would open
        return entry[2]
    if not filename or filename.startswith("<") and filename.endswith(">"):
        return []
    for fullname in [filename] + ([os.path.join(d, filename) for d in sys.path if isinstance(d, str)]
                                  if not os.path.isabs(filename) else []):
        try:
            st = os.stat(fullname)
        except (OSError, ValueError):
            continue
        data = read(fullname, st.st_size + 1)
        if data is None:
            return []
        try:
            import io
            lines = io.TextIOWrapper(io.BytesIO(data), _encoding(data), line_buffering=True).readlines()
        except (UnicodeDecodeError, LookupError):
            return []
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        if cache is _lines and len(_lines) >= MAX_SOURCES:
            _lines.clear()
        cache[filename] = st.st_size, st.st_mtime, lines, fullname
        return lines
    return []


_lines = {}  # getlines' cache, where the program has not imported linecache


def _encoding(data):
    """A source file's encoding as tokenize.detect_encoding reads it (PEP 263): a UTF-8 BOM, else
    a `coding[:=]NAME` comment on one of its first two lines (the second only after a comment or
    blank first line), else UTF-8."""
    if data.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    for line in data.split(b"\n", 2)[:2]:
        text = line.lstrip(b" \t\f")
        if text.startswith(b"#"):
            at = text.find(b"coding")
            if at >= 0 and text[at + 6:at + 7] in (b":", b"="):
                name = text[at + 7:].lstrip(b" \t")
                end = 0
                while end < len(name) and (name[end:end + 1].isalnum() or name[end:end + 1] in b"-_."):
                    end += 1
                if end:
                    return name[:end].decode("ascii", "replace")
        elif text.strip():
            break  # code on the first line: no cookie on the second
    return "utf-8"
