"""The log's bound (EARLYLOG_MAX_LOG): the note sinks.Logger writes with the kept last part of the
program's output past the bound, and its parser (the reader counts what was left out). Loaded by the
runtime only once a log passes its bound."""
import time

LEFT_OUT = "output left out: "


def left_out(lines, size, since, bound, kept):
    """The note written with the kept last lines: how much of the program's output was left out."""
    return "%s%d line%s (%.1f MiB) of the program's output from %s on, past the log's bound " \
           "(EARLYLOG_MAX_LOG=%g MiB); the %d line%s after them are kept" % (
               LEFT_OUT, lines, "" if lines == 1 else "s", size / 1048576.0,
               time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)), bound / 1048576.0,
               kept, "" if kept == 1 else "s")


def parse_left_out(text):
    """(lines, MiB) of a left_out() note, else None."""
    if not text.startswith(LEFT_OUT):
        return None
    words = text[len(LEFT_OUT):].split()
    try:
        return int(words[0]), float(words[2 if words[1] in ("line", "lines") else 1].strip("("))
    except (IndexError, ValueError):
        return None
