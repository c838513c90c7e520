"""Whose code a frame runs, by its file's path, one rule for the runtime (which threads are the
program's, runtime/stuck.py) and the reader (which frame is the user's, read/frames.py): the standard
library's and installed packages' frames are libraries', the rest the program's own. earlylog's own
frames are known by their folder: in a live process by this copy's (foreign), in a log by the
location the log names (the reader drops them). No `re`: the runtime calls it at its beats."""
import os

_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python")
OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # this copy of earlylog


def library(path):
    """True for the standard library (`.../lib/python3.11/...`, `<frozen ...>`) and installed packages."""
    return path.startswith("<frozen") or any(word in path for word in _LIBRARY)


def foreign(path):
    """In a live process: not the program's own code (a library's, or earlylog's own, marks.py's
    wrappers included)."""
    return path.startswith(OWN) or library(path)
