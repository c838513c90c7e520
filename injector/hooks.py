"""Exit records and exception hooks: how the process ended, with its real status and traceback.
It must run the user's original hooks exactly as before and never change an exit status."""


def start(logger):
    """Placeholder until issue 3 lands."""
