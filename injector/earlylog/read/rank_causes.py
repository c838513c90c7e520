"""The ranks of a distributed job, lined up by the collective each waits in (the dump's `collective:`
notes, runtime/collectives.py): ranks that issued different collectives, or different numbers of
them; every rank in the same collective with none returning; both ends of a pair waiting in recv.
It owns which collective a rank waits in (waiting()), the ranks of the job's newest attempt
(ranks()), and these run-level causes (causes.rank() says what makes a process a rank); verdict.py tells the straggler (a rank outside any collective while the
others wait for it) from the same facts. It only reads the judged report: never writes."""
from earlylog.read.causes import Cause, rank, secs
from earlylog.read.frames import is_file, where

CHECK = "; TORCH_DISTRIBUTED_DEBUG=DETAIL checks each collective's kind across the ranks"
UNEVEN_NEXT = ("give every rank the same number of batches (DistributedSampler(..., drop_last=True), or the "
               "same count on each rank), or train under DDP's `with model.join():` for uneven inputs")
BRANCH_NEXT = ("call every collective on every rank of its group, in one order: move it out of the rank "
               "condition (do the rank-only work alone, then the collective on all), or give it a group of "
               "only the ranks that call it (dist.new_group)")
TRANSPORT_NEXT = ("the collective itself does not complete: check that the hosts reach each other on every "
                  "port (firewalls; GLOO_SOCKET_IFNAME or NCCL_SOCKET_IFNAME on hosts with several network "
                  "interfaces), and for NCCL its own log (NCCL_DEBUG=INFO)")
P2P_NEXT = ("pair each recv with a send on the other rank, in an order both follow (one side sends first, or "
            "dist.batch_isend_irecv posts both at once)")


def waiting(d):
    """(thread, notes.Collective) of the thread of a stalled rank that waits in a collective (the one
    its stall names first, then the main thread, then any), else None."""
    if d.stall is None:
        return None
    order = [d.stall.main] + sorted(d.stall.threads, key=lambda t: not t.main)
    return next(((t, t.collective) for t in order if t is not None and t.collective is not None), None)


def ranks(out):
    """{rank: its newest process} of the job's newest attempt (a restarted rank: the newest wins)."""
    found = {}
    for d in out:
        r = rank(d)[0]
        if r is not None:
            found[r] = d
    return found


def find(report, folder):
    """The run-level causes of ranks waiting in collectives that cannot meet."""
    by_rank = ranks(report.processes)
    waits = {r: waiting(d) for r, d in by_rank.items() if d.state in ("stalled", "killed") and waiting(d)}
    if len(waits) < 2:
        return []
    causes = []
    for group in sorted({c.group for _t, c in waits.values()}, key=str):
        mine = {r: w for r, w in waits.items() if w[1].group == group}
        if len(mine) < 2:
            continue
        p2p = {r: w for r, w in mine.items() if w[1].peer is not None}
        if len(p2p) >= 2:
            causes += _p2p(by_rank, p2p)
            continue
        kinds = {(c.op, c.seq) for _t, c in mine.values()}
        if len(kinds) > 1:
            causes.append(_different(by_rank, mine, group))
        elif len(mine) == len(by_rank) and _whole(by_rank, mine):
            causes.append(_none_returns(by_rank, mine, group))
    return causes


def _whole(by_rank, mine):
    """Every rank of the job is here and waits (the world size, where known, says how many)."""
    world = max((rank(d)[1] or 0) for d in by_rank.values())
    return len(mine) >= max(world, 2)


def _issued(t, c):
    """`all_reduce #11 on group 0`, and who issued it when PyTorch did from C++: `, issued by DDP in
    backward for its gradient buckets`."""
    text = c.where
    python = any("/torch/distributed/" in f.file.replace("\\", "/") for f in t.frames)
    if not python and any(is_file(f.file, "torch/autograd/__init__.py") or is_file(f.file, "torch/_tensor.py")
                          for f in t.frames):
        text += " (DDP's gradient all_reduce, issued from C++ during backward)" if c.op.startswith("all_reduce") \
            else " (issued from C++ during backward)"
    elif not python and any("/torch/nn/parallel/" in f.file.replace("\\", "/") for f in t.frames):
        text += " (issued by DDP from C++ in its forward)"
    return text


def _in_backward(t):
    return not any("/torch/distributed/" in f.file.replace("\\", "/") for f in t.frames) and \
        any("/torch/autograd/" in f.file.replace("\\", "/") or "/torch/nn/parallel/" in f.file.replace("\\", "/")
            for f in t.frames)


def _steps(t, c):
    """`, in its step 6` for a rank waiting inside a training step (backward), else `, after 5
    training steps` (the optimizer steps it made)."""
    if c.step is None:
        return ""
    if _in_backward(t):
        return ", in its step %d" % (c.step + 1)
    return ", after %d training step%s" % (c.step, "" if c.step == 1 else "s")


def _different(by_rank, mine, group):
    """Ranks of one group in different collectives, or at different ordinals: none can return."""
    parts = ["rank %d is in %s in %s%s" % (r, _issued(t, c), where(t.frame), _steps(t, c))
             for r, (t, c) in sorted(mine.items())]
    inside = sorted(r for r, (t, _c) in mine.items() if _in_backward(t))
    done = sorted(r for r, (_t, c) in mine.items() if c.ran_out)
    seqs = {c.seq for _t, c in mine.values()}
    how = "different collectives" if len(seqs) == 1 else "different numbers of collectives (they wait at " \
        "different ordinals)"
    text = "the ranks issued %s on group %s, so none of them can return: %s" % (how, group, "; ".join(parts))
    if done and len(done) < len(mine):
        # A rank whose DataLoader ran out left its loop: the others had more batches.
        text += "; rank%s %s ran out of batches and left the training loop while %s went on: a different " \
                "number of batches per rank" % (_s(done), _list(done), _others(mine, done))
        step = UNEVEN_NEXT + CHECK
    elif inside and len(inside) < len(mine):
        outside = sorted(set(mine) - set(inside))
        text += "; likely: a collective that rank%s %s calls and rank%s %s, inside a training step, does not (a " \
                "collective under a rank condition), or rank%s %s left the training loop early (a different " \
                "number of batches per rank)" % (_s(outside), _list(outside), _s(inside), _list(inside),
                                                  _s(outside), _list(outside))
        step = BRANCH_NEXT + "; if the number of batches differs, " + UNEVEN_NEXT + CHECK
    else:
        text += "; likely: a collective that not every rank calls (one under a rank condition, or in a branch " \
                "that depends on each rank's data)"
        step = BRANCH_NEXT + CHECK
    return Cause("ranks-differ", text, step, [by_rank[r].pid for r in sorted(mine)])


def _s(ranks):
    return "s" if len(ranks) > 1 else ""


def _list(ranks):
    return ", ".join(map(str, ranks))


def _others(mine, ranks):
    rest = sorted(set(mine) - set(ranks))
    return "rank%s %s" % (_s(rest), _list(rest))


def _none_returns(by_rank, mine, group):
    """Every rank in the same collective, at the same ordinal, and none returns."""
    r, (t, c) = min(mine.items())
    longest = max((w[1].seconds or 0) for w in mine.values())
    text = "every rank (%s) is in %s and none returned%s" % (
        ", ".join(map(str, sorted(mine))), c.where, " after %s" % secs(longest) if longest else "")
    return Cause("collective-stuck", text, TRANSPORT_NEXT, [by_rank[r].pid for r in sorted(mine)])


def _p2p(by_rank, p2p):
    """Both ends of a pair waiting in recv (or both in send): the counts say whose send is missing."""
    out = []
    for r, (t, c) in sorted(p2p.items()):
        peer = int(c.peer) if c.peer.isdigit() else None
        other = p2p.get(peer)
        if peer is None or other is None or other[1].peer != str(r) or r > peer or other[1].op != c.op:
            continue
        a, b = (r, c), (peer, other[1])
        if c.op == "recv":
            sides = ["rank %d's recv #%d from rank %d has no send to match: rank %d sent %d to it" % (
                x, cx.seq or 0, y, y, cy.other or 0) for (x, cx), (y, cy) in ((a, b), (b, a))]
            text = "ranks %d and %d both wait in recv from each other (in %s and %s): %s" % (
                r, peer, where(t.frame), where(other[0].frame), "; ".join(sides))
        else:
            text = "ranks %d and %d both wait in send to each other (in %s and %s): neither posts the recv " \
                   "the other's send waits for" % (r, peer, where(t.frame), where(other[0].frame))
        out.append(Cause("p2p-unmatched", text, P2P_NEXT, [by_rank[r].pid, by_rank[peer].pid]))
    return out
