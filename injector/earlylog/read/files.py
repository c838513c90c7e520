"""What a log folder holds: its log files, and the run folders under a base folder.
The one definition of both; it only lists, never opens or writes."""
import os


def log_files(path):
    """The regular, non-hidden files of a folder, oldest name first (EARLYLOG_FILE may name any
    file, so a log is known by its lines, not by its name; hidden files are earlylog's requests)."""
    names = sorted(n for n in os.listdir(path) if not n.startswith("."))
    return [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]


def recent_runs(base):
    """The run folders under base (not its `cache`), most recently changed first; [] if none."""
    try:
        runs = [os.path.join(base, n) for n in os.listdir(base) if n != "cache" and not n.startswith(".")]
    except OSError:
        return []
    return sorted((r for r in runs if os.path.isdir(r)), key=_changed, reverse=True)


def _changed(path):
    try:
        return os.path.getmtime(path)
    except OSError:  # removed while we looked: the oldest
        return 0.0
