"""Whose code a stack frame is: the user's, or the standard library's and installed packages'.
The one definition the verdict, the idle rule and the views share; it only looks at paths."""
import re

_LIBRARY = re.compile(r"/(?:site|dist)-packages/|/lib/python\d|^<frozen")


def library(path):
    """True for the standard library and installed packages: not the user's code. (earlylog's own
    frames never get here: the reader drops them, knowing them by location.)"""
    return bool(_LIBRARY.search(path))


def user_frame(frames):
    """The innermost frame of the user's own code (frames run innermost first), else the innermost."""
    for frame in frames:
        if not library(frame[0]):
            return frame
    return frames[0] if frames else None
