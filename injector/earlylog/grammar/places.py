"""Whose code a frame runs, by its file's path, one rule for the runtime (which threads are the
program's, runtime/stuck.py) and the reader (which frame is the user's, read/frames.py): the standard
library's and installed packages' frames are libraries', the rest the program's own. earlylog's own
frames are known by their folder, on each side its own. No `re`: the runtime calls it at its beats."""

_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python")


def library(path):
    """True for the standard library (`.../lib/python3.11/...`, `<frozen ...>`) and installed packages."""
    return path.startswith("<frozen") or any(word in path for word in _LIBRARY)
