"""Early environment probes: what this process is, where it runs, and findings that explain hangs.
A probe must never import a heavy package, hang the process, or log a secret."""


def start(logger):
    """Placeholder until issue 3 lands."""
