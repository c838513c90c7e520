"""`earlylog tail [DIR] [-f]`: every process's lines merged in time order, one process tag per line.
It only reads; following, it polls for new files and new bytes and never holds a whole file."""
import heapq
import os
import sys
import time
from collections import deque

from earlylog.grammar import records
from earlylog.read import files, logread

POLL = 0.2      # seconds between looks at the folder when following
CHUNK = 1 << 16
REORDER = 256   # lines of one file held back to put threads' interleaved lines in time order


def add_parser(sub):
    p = sub.add_parser("tail", help="all processes' lines merged in time order; -f follows new ones")
    p.add_argument("folder", nargs="?", help="a log folder (default: the newest run)")
    p.add_argument("-f", "--follow", action="store_true", help="keep going: new lines and new processes")
    p.add_argument("-n", "--lines", type=int, default=20, metavar="N",
                   help="start with the last N lines of all processes together (default 20; 0: all)")
    p.set_defaults(func=main)


class Source:
    """One file: where we are in it, its unfinished last line, and whose lines it holds."""

    def __init__(self, path, clock, here):
        self.path, self.clock, self.here = path, clock, here
        self.pos = 0
        self.partial = b""
        self.when = 0  # whole milliseconds of the last line that had a time
        self.who = self.stamp = ""  # the last line's "pid tag" and time: raw faulthandler lines get them
        self.hosts = {}
        self.ours = None       # unknown until a line parses (or PROBE_LINES do not)
        self.unparsed = 0

    def read(self):
        """New complete lines as (time, text), up to what is written now. The file is open only
        while a chunk is read, so merging a thousand files never holds a thousand descriptors."""
        while self.ours is not False:  # not ours (a model file beside the logs): never read on
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.pos)
                    data = f.read(CHUNK)
            except OSError:
                return
            if not data:
                return
            self.pos += len(data)
            chunks = (self.partial + data).split(b"\n")
            self.partial = chunks.pop()
            if self.ours is None and len(self.partial) > logread.MAX_PROBE_LINE:
                self.ours = False  # no newline this far: binary, and its "line" would grow without end
            for raw in chunks:
                item = self.render(raw.decode("utf-8", "replace").rstrip("\r"))
                if item is not None:
                    yield item

    def render(self, line):
        if self.ours is False:
            return None
        rec = logread.parse(line)
        if rec is None:
            if self.ours is None:
                self.unparsed += 1
                if self.unparsed >= logread.PROBE_LINES:
                    self.ours = False
                return None
            return (self.when, "%s %s ! %s" % (self.stamp, self.who, line)) if line.strip() else None
        self.ours = True
        when = self.clock(rec)
        if when is not None:
            self.when = round(when * 1000)  # whole milliseconds, as text lines show them: JSON's ts ties with them
        self.stamp = rec["time"][11:]
        host = rec.get("host")
        if host is None:
            host = self.hosts.setdefault(rec["pid"], logread.host_from_name(self.path, rec["pid"]))
        host = records.safe_name(host) if host else None
        self.who = "%s%d %s" % (host + ":" if host and host != self.here else "", rec["pid"], rec["tag"])
        if rec["kind"] == "|":
            return self.when, "%s %s | %s" % (self.stamp, self.who, rec["msg"])
        return self.when, "%s %s %s: %s" % (self.stamp, self.who, rec["kind"], rec["msg"])


def _sources(folder, known, clock, here):
    try:
        paths = files.log_files(folder)
    except OSError:
        return []
    fresh = [Source(p, clock, here) for p in paths if p not in known]
    for s in fresh:
        known[s.path] = s
    return fresh


def main(args):
    from earlylog.cli import report
    folder = report.find_folder(args.folder)
    clock, here, known = logread.Clock(), records.safe_name(os.uname().nodename), {}
    out = sys.stdout
    try:
        sources = _sources(folder, known, clock, here)
        merged = heapq.merge(*[_in_order(_numbered(s.read(), i)) for i, s in enumerate(sources)])
        total = [0]

        def counted(items):
            for item in items:
                total[0] += 1
                yield item
        # A deque keeps the last N without holding every line of a big folder.
        shown = deque(counted(merged), maxlen=args.lines if args.lines > 0 else None)
        cut = len(shown) < total[0]
        # On stderr, so that a pipe gets the log lines only.
        sys.stderr.write("earlylog tail: %s%d line%s of %d log file%s in %s%s\n" % (
            "the last " if cut else "all ", len(shown), "" if len(shown) == 1 else "s", len(sources),
            "" if len(sources) == 1 else "s", folder, "; -n N shows more (-n 0: all)" if cut else ""))
        for _when, _seq, text in shown:
            out.write(text + "\n")
        out.flush()
        while args.follow:
            time.sleep(POLL)
            _sources(folder, known, clock, here)
            batch = []
            for i, s in enumerate(known.values()):
                batch.extend(_numbered(s.read(), i))
            batch.sort()
            for _when, _seq, text in batch:
                out.write(text + "\n")
            if batch:
                out.flush()
    except BrokenPipeError:  # `earlylog tail | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    except KeyboardInterrupt:
        pass
    return 0


def _in_order(items, window=REORDER):
    """A file's lines in time order. Threads stamp a line before they write it, so a line can land
    a few lines after a later-stamped one; heapq.merge needs each input sorted."""
    held = []
    for item in items:
        if len(held) >= window:
            yield heapq.heappushpop(held, item)
        else:
            heapq.heappush(held, item)
    while held:
        yield heapq.heappop(held)


def _numbered(items, source):
    """(time, (source, n), text): ties keep each file's own order."""
    for n, (when, text) in enumerate(items):
        yield when, (source, n), text
