"""The watchdog: fatal-signal tracebacks, stall and periodic stack dumps, on-demand dumps.
It must never keep a finished process alive, block on the console, or change exit statuses."""


def start(logger):
    """Placeholder until issue 4 lands."""
