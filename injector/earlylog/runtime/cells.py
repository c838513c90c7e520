"""Notebook cells by the names their users know: a frame in a cell of a Jupyter kernel (or an
IPython shell) runs code from a file IPython named after the cell's text
(`/tmp/ipykernel_4242/3058988800.py`); its user knows it as `In[2]`. IPython's compiler keeps the
map from that file name to the cell's execution count (`CachingCompiler._filename_map`, which its
own tracebacks use to print `Cell In[2], line 4`). A dump line, one per cell on a thread's stack,
parsed by the reader (read/frames.py):
  cell: In[N] is PATH
It runs in the watchdog thread at dump time and only reads: the shell singleton, its compiler
and the map are found through plain dict reads (module, class and instance dicts), never through
getattr, a property or a trait, and the map is only looked up, never iterated. Where IPython is
not loaded, or is laid out otherwise, it writes nothing."""
import sys

from earlylog.grammar import notes as grammar
from earlylog.runtime import introspect

MAX_FRAMES = 40  # frames looked at per thread, as in the dump itself


def notes(frame):
    """`cell:` lines for the cells on the stack ending in frame; [] outside IPython."""
    files = _filename_map()
    if files is None:
        return []
    out, seen = [], set()
    depth = 0
    while frame is not None and depth < MAX_FRAMES:
        path = frame.f_code.co_filename
        if path not in seen:
            seen.add(path)
            number = files.get(path)
            if type(number) is int:
                out.append(grammar.cell(number, path))
        frame = frame.f_back
        depth += 1
    return out


def _filename_map():
    """IPython's {cell file name: execution count}, or None."""
    module = sys.modules.get("IPython.core.interactiveshell")
    cls = (introspect.instance_dict(module) or {}).get("InteractiveShell") if module is not None else None
    if not isinstance(cls, type):
        return None
    shell = introspect.class_dict(cls).get("_instance")  # traitlets' singleton, kept on each class of its MRO
    compiler = (introspect.instance_dict(shell) or {}).get("compile") if shell is not None else None
    found = (introspect.instance_dict(compiler) or {}).get("_filename_map") if compiler is not None else None
    return found if type(found) is dict else None
