"""Self-contained copies of the earlylog runtime: for `earlylog install` and for PYTHONPATH use.
It only copies this package's own source files; it never imports or runs what it copies."""
import hashlib
import os
import shutil

from earlylog import __version__

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What a process with EARLYLOG=1 loads: the package's public face, the runtime side and the log's
# grammar it writes through, never the reader or the command.
_TOP_FILES = ("__init__.py", "phases.py")
FOLDERS = ("grammar", "runtime")


def runtime_files():
    """The files a runtime copy holds, relative to the package folder (sorted)."""
    return sorted(list(_TOP_FILES) + [os.path.join(folder, n) for folder in FOLDERS
                                      for n in os.listdir(os.path.join(PACKAGE_DIR, folder)) if n.endswith(".py")])


def template_path():
    """sitecustomize.py: packaged beside the runtime in a wheel, or in the source checkout."""
    for path in (os.path.join(PACKAGE_DIR, "_template", "sitecustomize.py"),
                 os.path.join(os.path.dirname(os.path.dirname(PACKAGE_DIR)), "sitecustomize_template",
                              "sitecustomize.py")):
        if os.path.isfile(path):
            return path
    raise FileNotFoundError("the sitecustomize template is missing from this earlylog installation")


def copy_runtime(dest):
    """Write dest/earlylog/ with the runtime files; returns the paths written."""
    pkg = os.path.join(dest, "earlylog")
    for folder in FOLDERS:
        os.makedirs(os.path.join(pkg, folder), exist_ok=True)
    written = []
    for name in runtime_files():
        target = os.path.join(pkg, name)
        shutil.copyfile(os.path.join(PACKAGE_DIR, name), target)
        written.append(target)
    return written


def _fingerprint():
    digest = hashlib.sha256()
    for path in [os.path.join(PACKAGE_DIR, n) for n in runtime_files()] + [template_path()]:
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:10]


def cache_root():
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is invalid (and breaks after a cd)
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "earlylog")


def pythonpath_folder():
    """A folder with sitecustomize.py beside a runtime copy, made once per version and content."""
    from earlylog.grammar import records
    from earlylog.runtime import sinks
    name = "runtime-%s-%s" % (__version__, _fingerprint())
    candidates = [cache_root(), os.path.join(records.default_base(), "cache")]
    last_error = None
    for root in candidates:
        folder = os.path.join(root, name)
        try:
            if root != candidates[0]:
                # Code we put on PYTHONPATH must not sit where another user of /tmp could have
                # planted it: the folder must be ours, mode 0700.
                sinks.private_dir(records.default_base())
            if os.path.isfile(os.path.join(folder, "sitecustomize.py")):
                return folder
            tmp = folder + ".tmp%d" % os.getpid()
            copy_runtime(tmp)
            shutil.copyfile(template_path(), os.path.join(tmp, "sitecustomize.py"))
            try:
                os.rename(tmp, folder)
            except OSError:  # another process made it first
                shutil.rmtree(tmp, ignore_errors=True)
            _prune(root, name)
            return folder
        except OSError as exc:
            last_error = exc
    raise OSError("cannot write a runtime folder under %s (%s)" % (" or ".join(candidates), last_error))


STALE_AFTER = 86400.0


def _prune(root, keep):
    """Remove runtime folders of other versions that are over a day old: a launcher started
    earlier may still hand a fresh one's path to new children, so never a recent one."""
    import time
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith("runtime-") and name != keep:
            try:
                if time.time() - os.lstat(path).st_mtime > STALE_AFTER:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass
