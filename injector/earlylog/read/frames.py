"""Frames as the reader shows them: which are the user's own, which library call the user's code
is inside, `func at file.py:12`, the await chains of a thread's pending asyncio tasks and the thread
a join waits for. Frames
are model.Frame (file, line, function) tuples, innermost first. Pure functions of their arguments; they never
read files or raise on odd paths."""
import os
import re

from earlylog.grammar import notes, places
from earlylog.grammar.parked import is_file  # the one rule for a file by its path's end, both sides'
from earlylog.read.model import Frame, as_frames

_WRAPPERS = ("wrapper", "inner", "marked", "decorate_context", "_fn", "__call__")
_CELL = re.compile(r"^<cell (In\[\d+\])>$")  # a notebook cell's frame, as cells() names it


def library(path):
    """True for the standard library and installed packages: not the user's code (grammar/places.py,
    the runtime's rule too). earlylog's own frames never get here: the reader drops them, knowing
    them by location."""
    return places.library(path)


def user_frame(frames):
    """The innermost frame of the user's own code (frames run innermost first), else the innermost."""
    for frame in frames:
        if not library(frame.file):
            return frame
    return frames[0] if frames else None


def call_name(frames):
    """The library call the user's code is inside, e.g. `subprocess.run`, `barrier`; None if none."""
    u = next((i for i, f in enumerate(frames) if not library(f.file)), None)
    if u is None:
        return None  # no user code on the stack (a launcher's own loop): no call of the user's to name
    for path, _line, func in reversed(frames[:u]):
        if func.startswith(("_", "<")) or func in _WRAPPERS:
            continue
        if "torch/distributed" in path:
            return func
        return "%s.%s" % (_module(path), func)
    return None


def _module(path):
    """`subprocess` for .../subprocess.py; for a private module (filelock/_core/_lock.py,
    concurrent/futures/_base.py) the nearest public package above it: `filelock`, `futures`."""
    parts = path.replace(os.sep, "/").split("/")
    parts[-1] = parts[-1][:-3] if parts[-1].endswith(".py") else parts[-1]
    return next((part for part in reversed(parts) if part and not part.startswith("_")), parts[-1])


def where(frame):
    """`func at file.py:12`; in a notebook's cell, `func at cell In[2], line 4`, or for the cell's own
    code `cell In[2], line 4`, as the notebook names it."""
    if not frame:
        return "an unknown place"
    return place(frame) if frame.function == "<module>" and _CELL.match(frame.file) else \
        "%s at %s" % (frame.function, place(frame))


def place(frame):
    """`file.py:12`, or `cell In[2], line 4` for a notebook's cell (see cells())."""
    m = _CELL.match(frame.file)
    return "cell %s, line %d" % (m.group(1), frame.line) if m else "%s:%d" % (os.path.basename(frame.file), frame.line)


def cells(threads):
    """Name each notebook cell's file (IPython names it after the cell's text) `<cell In[2]>` in the
    frames and notes of a dump's threads (objects with .frames and .notes), from their `cell: In[2]
    is PATH` notes (runtime/cells.py): a lock held in one cell's function is named so in another's."""
    names = {c.path: "<cell %s>" % c.name for t in threads for c in notes.every(t.notes, notes.Cell)}
    for t in threads if names else ():
        t.frames = [f._replace(file=names[f.file]) if f.file in names else f for f in t.frames]
        t.notes = [_renamed(n, names) if not n.startswith("cell: ") else n for n in t.notes]


def _renamed(note, names):
    for path, name in names.items():
        note = note.replace(" at %s:" % path, " at %s:" % name)
    return note


def frame_tuple(frame):
    """A Frame from its --json form (a FRAME dict), for the views that read the report as --json has it."""
    return Frame(frame["file"], frame["line"], frame["function"]) if frame else None


def task_chains(texts):
    """The pending asyncio tasks a thread's dump notes list, as (name, frames innermost first,
    what the innermost awaits, e.g. `a Future`, or None)."""
    return [(t.name, as_frames(t.frames), t.awaiting) for t in notes.every(texts, notes.Task)]


def sync_name(sync):
    """`asyncio.Lock `lock``, or `an asyncio.Lock` where the code's name for it is not known."""
    return "asyncio.%s `%s`" % (sync.kind, sync.name) if sync.name else "an asyncio.%s" % sync.kind


def awaited_words(what, place=""):
    """What a task awaits, for a sentence, with `place` (` there`) after the object: an asyncio
    lock, event, semaphore or queue by its name and who holds it (`asyncio.Lock `lock` there, which
    that task holds itself`); else as the dump has it."""
    sync = notes.parse_awaits_sync(what)
    if sync is None:
        return what + place if what else what
    words = sync_name(sync)
    if sync.detail:
        words += " (%s)" % sync.detail
    words += place
    if sync.holder == notes.THIS_TASK:
        words += ", which that task holds itself"
    elif sync.holder:
        words += ", held by %s" % sync.holder
    return words


def in_event_loop(frames):
    """Parked in the asyncio loop's own select: no callback of anyone's is running."""
    return len(frames) >= 2 and is_file(frames[0].file, "selectors.py") and frames[1].function == "_run_once" \
        and is_file(frames[1].file, "asyncio/base_events.py")


