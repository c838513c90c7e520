"""Thread-level causes of a hang or an end (see causes.py); filled in by the thread-causes work."""


def find(report, folder):
    """The thread-level causes the judged report and the read folder show."""
    return []
