"""`earlylog watch [DIR] [--on-stall COMMAND]`: a live view of a run from outside its processes,
for a person watching it or a sidecar container next to the job. It re-reads the folder every
few seconds and shows one line per process (state, where, for how long) and each cause as it
appears: redrawn in place on a terminal, as plain lines when piped (a line only when something
changed). With --on-stall it runs COMMAND once per stuck stall, with the JSON EARLYLOG_ON_STALL
gets (docs/acting.md). It only reads the folder, never writes into it."""
import json
import os
import subprocess
import sys
import time

from earlylog.cli import judge, report
from earlylog.cli.errors import CliError
from earlylog.read import logread, verdict
from earlylog.read.causes import label, secs
from earlylog.read.frames import where


def add_parser(sub):
    p = sub.add_parser("watch", help="a live view of a run: one line per process, causes as they appear")
    p.add_argument("folder", nargs="?", help="a log folder (default: the newest run)")
    p.add_argument("--on-stall", metavar="COMMAND", help="run COMMAND once per stuck stall, the stall as JSON "
                   "on its stdin (as EARLYLOG_ON_STALL)")
    p.add_argument("--every", type=float, default=2.0, metavar="S", help="seconds between looks (default 2)")
    p.set_defaults(func=main)


def line(d, now):
    """`rank 1  stalled  read_index at job.py:6  for 41 s`: one process, now."""
    state = d.state
    place = where(d.where) if d.where else (d.phase or "")
    if d.stall and state in ("stalled", "idle", "busy"):
        how_long = "for %s" % secs(d.stall.seconds or 0)
    elif d.end is not None:
        how_long = "ended %s ago%s" % (secs(max(0.0, now - d.end)), ", status %s" % d.status
                                       if d.status is not None else "")
    else:
        how_long = "last sign of life %s ago" % secs(max(0.0, now - (d.last_seen or now)))
    return "%-22s %-10s %s%s" % (label(d), state, place + "  " if place else "", how_long)


class Watcher:
    def __init__(self, folder, command, tty):
        self.folder, self.command, self.tty = folder, command, tty
        self.shown = {}         # (host, pid) -> (state, where) last printed (piped)
        self.causes = set()     # cause texts already printed
        self.alerted = set()    # (host, pid, stall since) the command ran for
        self.children = []

    def look(self, now=None):
        now = time.time() if now is None else now
        result = verdict.judged(logread.read(self.folder), now=now)
        out = []
        for d in result.processes:
            text = line(d, now)
            key, state = (d.host, d.pid), (d.state, d.where)
            if self.tty or self.shown.get(key) != state:
                out.append(text)
                self.shown[key] = state
            if self.command and d.state == "stalled" and judge.why_not(d, result) is None:
                self._alert(d, result)
        new = [c for c in result.causes if c.text not in self.causes]
        self.causes.update(c.text for c in new)
        causes = [c.text + ("; next: " + c.next if c.next else "") for c in
                  (result.causes if self.tty else new)]
        self.children = [c for c in self.children if c[0].poll() is None and not self._late(c)]
        return result, out, causes

    def _alert(self, d, result):
        key = (d.host, d.pid, d.stall.since)
        if key in self.alerted:
            return
        self.alerted.add(key)
        payload = judge.about(d, result, self.folder)
        payload.pop("stuck", None)
        payload["seconds"] = d.stall.seconds
        env = {k: v for k, v in os.environ.items() if not k.startswith("EARLYLOG")}
        child = subprocess.Popen(["/bin/sh", "-c", self.command], stdin=subprocess.PIPE, env=env,
                                 start_new_session=True)
        try:
            child.stdin.write((json.dumps(payload) + "\n").encode())
            child.stdin.close()
        except OSError:
            pass
        # The time EARLYLOG_ON_STALL's command gets. Imported here: `earlylog report` and a watch
        # without --on-stall load no runtime module.
        from earlylog.runtime.act import COMMAND_LIMIT
        self.children.append((child, time.monotonic() + COMMAND_LIMIT))

    def _late(self, entry):
        child, deadline = entry
        if time.monotonic() < deadline:
            return False
        child.kill()
        child.wait()
        return True


def main(args):
    folder = report.find_folder(args.folder)
    if args.every <= 0:
        raise CliError("--every takes a number of seconds above 0")
    tty = sys.stdout.isatty()
    watcher = Watcher(folder, args.on_stall, tty)
    while True:
        try:
            result, lines, causes = watcher.look()
        except OSError as exc:
            raise CliError("cannot read %s (%s)" % (folder, exc.strerror or exc))
        if tty:
            head = "%s  %s  (every %g s, Ctrl-C to stop)" % (time.strftime("%H:%M:%S"), result.verdict[0],
                                                            args.every)
            sys.stdout.write("\x1b[H\x1b[2J" + "\n".join([head, ""] + lines + ([""] + causes if causes else [])) + "\n")
        else:
            stamp = time.strftime("%H:%M:%S ")
            sys.stdout.write("".join(stamp + x + "\n" for x in lines) +
                             "".join(stamp + "cause: " + c + "\n" for c in causes))
        sys.stdout.flush()
        time.sleep(args.every)
