"""The command's one error type: a plain sentence for the user, and exit status 2.
Only earlylog.cli raises and catches it; the reader and the runtime never see it."""


class CliError(Exception):
    """A plain sentence for the user; the command exits with status 2."""
