"""A thread waiting for its person at a terminal: input() or a pdb/breakpoint() prompt, getpass,
code.interact(), help() or the interactive prompt (the REPL), blocked reading a terminal (or in
readline's select() on a terminal stdin), or waiting for a child that reads it (a pager, an
editor: less, vim). Such a process is idle, not stuck, and a stall line printed on that terminal
would land in the prompt the person is answering: the watchdog keeps its line to the log, and the
dump notes the thread (`terminal: waiting for input at the terminal (the pdb prompt)`). A prompt
on a stdin that is a pipe (a launcher's) is not this: it may wait for ever, a cause. Only the
controlling terminal counts (a serial port is a device). It only reads /proc and frames, and asks
isatty(), fstat() and tcgetattr(); it must never read from or change a terminal."""
import os
import sys

from earlylog.grammar.stalls import TERMINAL_WORDS as WORDS  # the stall line's words for it
from earlylog.runtime import fds, kstate, threads

# Frames of the standard library that prompt, innermost first, by file; the first one found names it.
_PROMPTS = (("getpass.py", "getpass"), ("pdb.py", "the pdb prompt"), ("code.py", "the interactive prompt"),
            ("_pyrepl/", "the interactive prompt"), ("pydoc.py", "help()"))
_STDLIB = os.path.dirname(os.__file__)


def note(tid, frame, main=False):
    """The `terminal:` line of a thread waiting for input at a terminal, or None."""
    what = _prompt(tid, frame, main)
    from earlylog.grammar import notes  # a dump's: waiting(), at a stall, needs none of it
    return notes.terminal(WORDS, what) if what else None


def waiting():
    """`waiting for input at the terminal (input()) in ask at ask.py:3` when a thread of this process
    waits for its person at a terminal, else None."""
    frames = threads.current_frames()
    main = threads.main_ident()
    natives = threads.native_ids()
    ours = set(natives) - {main}
    program = threads.program_threads()
    idents = [main] + [ident for ident in frames if ident != main and ident not in ours]
    for ident in idents:
        tid = natives.get(ident) or getattr(program.get(ident), "native_id", None)
        frame = frames.get(ident)
        what = _prompt(tid, frame, ident == main) if tid else None
        if what:
            return "%s (%s)%s" % (WORDS, what, _at(frame))
    return None


def _prompt(tid, frame, main):
    """What the thread prompts with ('input()', 'the pdb prompt', ...), or None when it does not wait
    on a terminal."""
    stat = (threads.read("/proc/self/task/%d/stat" % tid) or b"").rpartition(b")")[2].split()
    if stat[:1] != [b"S"]:  # running, or stopped (a background job that read its terminal)
        return None
    call = kstate.syscall(tid)
    if call is None:
        return None
    name, _number, args = call
    if name == "read" and _tty(args[0]):
        return _named(frame)
    if name in ("wait", "waitid"):
        return _child_at_terminal()
    if name not in ("poll", "read"):
        return None
    if frame is None:  # the interactive prompt runs in C, with no Python frame
        return "the interactive prompt" if main and hasattr(sys, "ps1") and _tty(0) else None
    named = _named(frame, readline=True)
    return named if named and _tty(0) else None


def _child_at_terminal(depth=3):
    """`less, pid 812` for a process below this one (a pager, an editor, a password prompt) that
    waits for input at this process's controlling terminal while this one waits for it, else None.
    It reads the terminal itself, or polls it with the terminal switched out of line mode (a
    full-screen program: less, vim, top)."""
    ours = _controlling()
    if not ours:
        return None
    found, level = [], [os.getpid()]
    for _ in range(depth):
        level = [child for pid in level for child in _children(pid)]
        found += level
    for pid in found:
        stat = (threads.read("/proc/%d/stat" % pid) or b"").rpartition(b")")[2].split()
        if len(stat) < 5 or stat[0] != b"S" or int(stat[4]) != ours:
            continue
        call = kstate.syscall(pid, pid)
        if call is None:
            continue
        name, _number, args = call
        if (name == "read" and _reads_terminal(pid, args[0], ours)) or (name == "poll" and not _line_mode()):
            comm = (threads.read("/proc/%d/comm" % pid) or b"?").decode("utf-8", "replace").strip()
            return "%s, pid %d" % (comm, pid)
    return None


def _children(pid):
    out = []
    for tid in fds.listdir("/proc/%d/task" % pid) if os.path.isdir("/proc/%d/task" % pid) else ():
        out += [int(w) for w in (threads.read("/proc/%d/task/%s/children" % (pid, tid)) or b"").split()]
    return out


def _reads_terminal(pid, fd, ours):
    try:
        rdev = os.stat("/proc/%d/fd/%d" % (pid, fd)).st_rdev
    except OSError:
        return False
    return rdev in (ours, os.makedev(5, 0))


def _line_mode():
    """Is this process's terminal in line mode (ICANON), as a shell leaves it? A pager or an editor
    switches it off while it runs. tcgetattr only reads."""
    import termios
    for fd in (0, 1, 2):
        if _tty(fd):
            try:
                return bool(termios.tcgetattr(fd)[3] & termios.ICANON)
            except termios.error:
                return True
    return True


def _named(frame, readline=False):
    """The prompt's name from the frames. readline: the thread is in select()/poll(), as input() is
    with the readline module loaded, so a frame that prompts must be there."""
    seen = frame
    while seen is not None:
        path = seen.f_code.co_filename.replace(os.sep, "/")
        for suffix, what in _PROMPTS:
            if path.startswith(_STDLIB.replace(os.sep, "/")) and (
                    suffix in path if suffix.endswith("/") else path.endswith("/" + suffix)):
                return what
        seen = seen.f_back
    lines = fds.getlines(frame.f_code.co_filename) if frame is not None else []  # through a high descriptor
    if lines and 0 < frame.f_lineno <= len(lines) and "input(" in lines[frame.f_lineno - 1]:
        return "input()"
    return None if readline else "a read from the terminal"


def _at(frame):
    """` in FUNC at FILE:LINE` for the innermost frame outside the standard library (the program's
    prompt), or '' (the interactive prompt's own frames)."""
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith((_STDLIB, "<")) and "/earlylog/" not in path and "site-packages" not in path:
            return " in %s at %s:%d" % (frame.f_code.co_name, os.path.basename(path), frame.f_lineno)
        frame = frame.f_back
    return ""


def _controlling():
    """The device number of this process's controlling terminal, 0 when it has none."""
    stat = (threads.read("/proc/self/stat") or b"").rpartition(b")")[2].split()
    try:
        return int(stat[4])
    except (IndexError, ValueError):
        return 0


def _tty(fd):
    """Is fd the process's controlling terminal (or /dev/tty, which names it)? A serial port or
    another terminal the program reads is a device, not its person."""
    controlling = _controlling()
    try:
        return controlling != 0 and os.isatty(fd) and os.fstat(fd).st_rdev in (controlling, os.makedev(5, 0))
    except (ValueError, OSError):
        return False
