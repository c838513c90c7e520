"""The program's daemon threads still at work when it ends: Python stops them at exit without a
word, wherever they are (a checkpoint half written, an upload half sent), so the exit record says
which were (hooks.py). Loaded at exit only, and only by a process with threads besides its main
one; it reads threading's registry, frames and /proc, never runs the program's code, never raises."""
import sys
import time
from _thread import get_ident

from earlylog.grammar import records
from earlylog.runtime import introspect, kstate, threads

# System calls a blocked thread is still at work in: output going out, a connection being made.
_WORKING_CALLS = ("write", "connect")
AGAIN = 0.01  # seconds before a second look: a heartbeat thread caught awake between its sleeps is not at work


def at_work(program_frame):
    """[(name, place)] of the program's daemon threads at work now, and still a moment later:
    running, in disk I/O, or blocked writing or connecting, in the program's own code (a library's
    helper thread is none); not one that waits (for work, a lock, input, a sleep). program_frame:
    hooks.program_frame (the program's own frame from a frame outwards; hooks loads this module)."""
    found = _look(program_frame)
    if found:
        time.sleep(AGAIN)
        again = {tid for tid, _name, _place in _look(program_frame)}
        found = [(tid, name, place) for tid, name, place in found if tid in again]
    return [(name, place) for _tid, name, place in found]


def _look(program_frame):
    threading = sys.modules.get("threading")
    active = introspect.field(threading, "_active") if threading is not None else None
    if type(active) is not dict:
        return []
    frames = threads.current_frames()
    out = []
    for ident, thread in list(active.items()):
        frame = frames.get(ident)
        if ident == get_ident() or frame is None or introspect.field(thread, "_daemonic") is not True:
            continue
        mine = program_frame(frame)
        tid = introspect.field(thread, "_native_id")
        if mine is None or type(tid) is not int or not _working(tid):
            continue
        name = introspect.field(thread, "_name")
        out.append((tid, name if type(name) is str else "?",
                    records.place(mine.f_code.co_name, mine.f_code.co_filename, mine.f_lineno)))
    return out


def _working(tid):
    stat = kstate.state(tid)
    if stat in ("R", "D"):
        return True
    call = kstate.syscall(tid) if stat == "S" else None
    return call is not None and call[0] in _WORKING_CALLS
