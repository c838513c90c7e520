"""The reader's typed model of what one process's log says: a frame of a stack (Frame), the stall
it was last in (Stall), the crash that ended it (Crash). logread builds them as it reads; the causes
and the verdict read them by field name. It owns only these shapes and their field meanings: it
never reads files, parses lines or judges, and it is not the JSON the report writes (verdict.py
builds those dicts, which are the schema)."""
from collections import namedtuple

# One frame of a stack, innermost first in a list: file path, line number, function (`<module>`,
# or `<source>` for a SyntaxError's place). A tuple still, so `path, line, func = frame` works.
Frame = namedtuple("Frame", "file line function")


def as_frames(frames):
    """Frames of (file, line, function) tuples (the runtime's notes write plain ones)."""
    return [Frame(*f) for f in frames]
