"""The user's own stdout/stderr: made live (line-buffered) and copied into the log file (tee).
It must keep sys.stdout/sys.stderr real text streams and never block or reorder the user's output."""


def start(logger):
    """Placeholder until issue 3 lands."""
