"""earlylog: zero-edit, env-gated logging, watchdog and probes for Python processes that hang.
This module is the public face (`log`, `__version__`, the PEP 829 `site_hook`); PEP 829 start
files import it in every process, so it must stay cheap to import and import nothing heavy."""
import os
import sys

__version__ = "0.3.3"
__all__ = ["log", "enabled", "__version__"]

# The one definition of the words that keep earlylog off; the .pth line is generated from it.
OFF_WORDS = ("", "0", "false", "off", "no")


def enabled(environ=os.environ):
    """True when EARLYLOG asks for earlylog (anything but 0, empty, false, off, no)."""
    return environ.get("EARLYLOG", "").strip().lower() not in OFF_WORDS


_STATE = __name__ + ".runtime.state"


def log(message):
    """Write one mark to this process's earlylog log; does nothing when earlylog is off."""
    # No import when off: threads racing to import the runtime held its import lock across a
    # fork, and the fork child hung forever in log() (docs/design.md#log-never-imports).
    state = sys.modules.get(_STATE)
    logger = state.logger if state is not None else None
    if logger is not None:  # a fork child's inherited logger writes nothing (sinks.Logger.event)
        logger.event("mark", str(message))


def site_hook():
    """Entry point of earlylog.start (Python 3.15+); the twin of the .pth line."""
    if enabled():
        from earlylog import runtime
        runtime.start("start")
