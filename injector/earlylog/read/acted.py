"""What earlylog itself did about a stall (runtime/act.py): a process EARLYLOG_STALL_EXIT ended,
where it was stuck, and, for a rank of a torchrun job, whether the launcher's next attempt ran
(each rank's start line carries torchrun's restart count). It only reads the judged report."""
from earlylog.read.causes import Cause, label
from earlylog.grammar import records


def ended(d):
    """(how long, where, the knob's value) for a process EARLYLOG_STALL_EXIT ended, else None: the
    exit record's words (runtime/act.py writes them, records.ended_by_us), `ended by earlylog:
    stuck for 6 s in read_index at job.py:5 (EARLYLOG_STALL_EXIT=6)`."""
    return records.parse_ended(d.exit_call) if d.state == "failed" else None


def _attempt(d):
    return " (torchrun attempt %d)" % d.restart if d.restart is not None else ""


def _next_attempt(d, out):
    """`, and torchrun's next attempt ran: ranks 0, 1 exited 0` for a rank whose launcher started
    the group again, else ""."""
    if d.restart is None:
        return ""
    later = [o for o in out if o.host == d.host and o.ppid == d.ppid and o.rank is not None
             and (o.restart or 0) == d.restart + 1]
    if not later:
        return "; no later attempt of its job logged here (--max-restarts spent, or the launcher gave up)"
    # The other ranks of its attempt waited for it (a collective, the rendezvous) until the agent
    # stopped them to start the group again: not stuck on their own, nor stopped at the run's end.
    stopped = sorted((o for o in out if o is not d and o.host == d.host and o.ppid == d.ppid
                      and o.rank is not None and o.restart == d.restart and not ended(o)),
                     key=lambda o: o.rank)
    then = "; torchrun stopped %s to start the group again" % ", ".join(
        "rank %d (%s)" % (o.rank, "waiting in %s" % o.phase.split()[0] if o.phase else o.state)
        for o in stopped) if stopped else ""
    done = sorted(o.rank for o in later if o.state == "exited")
    rest = sorted((o for o in later if o.state != "exited"), key=lambda o: o.rank)
    words = []
    if done:
        words.append("rank%s %s exited 0" % ("" if len(done) == 1 else "s", ", ".join(map(str, done))))
    words += ["rank %d %s" % (o.rank, o.state) for o in rest]
    return "%s; torchrun's next attempt (restart %d) ran: %s" % (then, d.restart + 1, ", ".join(words))


def find(report, folder):
    causes = []
    out = report.processes
    for d in out:
        found = ended(d)
        if not found:
            continue
        seconds, where, knob = found
        causes.append(Cause(
            "stall-exit", "%s%s was stuck for %s in %s; earlylog ended it with exit status %s "
                          "(EARLYLOG_STALL_EXIT=%s) so that its launcher would restart it%s" % (
                              label(d), _attempt(d), seconds, where, d.status, knob, _next_attempt(d, out)),
            "a restart hides the hang, it does not fix it: see why %s waited there "
            "(`earlylog report --stacks` shows its stack)" % where.partition(" at ")[0], [d.pid]))
    return causes
