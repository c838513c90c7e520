"""Process-level causes of a hang or an end (see causes.py); filled in by the process-causes work."""


def find(report, folder):
    """The process-level causes the judged report and the read folder show."""
    return []
