"""Which collective of torch.distributed a thread waits in, read where PyTorch keeps it, at a dump or
a stall: the `collective:` note under the thread and the stall line's words for it. PyTorch's Flight
Recorder (on by default from torch 2.7, any backend, 2000 entries; TORCH_FR_BUFFER_SIZE) keeps each
collective a process group ran: its kind, its ordinal in the group (collective_seq_id), when it was
issued and by which thread, and per group the last one issued and the last one completed. So the
collectives PyTorch issues from C++ (DDP's gradient buckets in backward, FSDP's gathers) are named as
the ones the program calls. Where the recorder is off or absent, the innermost torch.distributed
frame names the call, without its ordinal. Point-to-point calls: gloo's recorder leaves them out, so
the one wrap of earlylog's own (runtime/marks.py's p2p entry) counts sends and receives per peer.

It never imports torch, never calls a collective, never takes a lock of PyTorch's but the recorder's
own (its dump copies the ring under the recorder's mutex, which a collective holds for an append:
made to be read from a watchdog thread), reads process groups from torch's module dicts only
(introspect's contract), and never raises. It runs in the watchdog thread, under threads.gated."""
import os
import sys
import time

from earlylog.runtime import introspect

FRESH = 0.5   # seconds a read of the recorder serves every thread of one dump
_C10D = "torch.distributed.distributed_c10d"
# Frames a wait in a collective sits under: torch.distributed's Python calls, autograd's backward
# (DDP's buckets are reduced from C++ during it), DDP's forward (its buffers' broadcast).
_SITES = ("/torch/distributed/", "/torch/autograd/", "/torch/nn/parallel/")
# torch.distributed's Python entry points that are collectives or point-to-point calls, as the
# innermost such frame names them (a decorator's wrapper sits above).
_CALLS = frozenset((
    "all_reduce", "all_reduce_coalesced", "barrier", "monitored_barrier", "broadcast", "reduce", "all_gather",
    "all_gather_into_tensor", "all_gather_coalesced", "_all_gather_base", "gather", "scatter", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "all_gather_object",
    "gather_object", "broadcast_object_list", "scatter_object_list", "send_object_list", "recv_object_list",
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "wait"))
P2P = ("send", "recv")
# (call, peer rank or None for any source) -> calls so far, counted by marks.py's wrap of isend and
# irecv, which writes it inline (the dict is the interface: the wrap runs in the program's call).
P2P_COUNTS = {}
_read = [0.0, None]  # when the recorder was last read, and what it said


def _reset_after_fork():
    P2P_COUNTS.clear()
    _read[:] = [0.0, None]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def initialized():
    """torch.distributed's default process group exists (read from its module, nothing called)."""
    world = vars(sys.modules[_C10D]).get("_world") if _C10D in sys.modules else None
    return world is not None and introspect.instance_dict(world).get("_default_pg") is not None


def lines(ident, frame):
    """The `collective:` note of a thread waiting in a collective, else []."""
    from earlylog.grammar import notes  # loaded by a dump, not with torch.distributed (the p2p count)
    found = waiting(ident, frame)
    return [notes.collective(*found)] if found else []


def words(ident, frame):
    """`waiting in all_reduce #11 on group 0 for peer ranks` for a stall line, else None."""
    from earlylog.grammar import stalls
    from earlylog.grammar import notes
    found = waiting(ident, frame)
    if not found:
        return None
    return stalls.waiting_for_peers(notes.Collective(*found).where, found[9])


def waiting(ident, frame):
    """notes.collective()'s arguments for a thread whose stack is in a collective, else None."""
    try:
        if not initialized():
            return None
        if "/torch/" not in frame.f_code.co_filename.replace("\\", "/"):
            # Its innermost frame is the program's (a lock it takes inside DDP's forward, say): it
            # waits there, whatever collective it issued before.
            return None
        call = _python_call(frame)
        if call is None and not _under_site(frame):
            return None
        entry, done, issued, groups = _in_flight(ident) if call not in P2P else (None, None, None, _groups())
        if entry is None and call is None:
            return None  # backward or DDP's forward with nothing of this thread's in flight: computing
        return _fields(call, entry, done, issued, groups)
    except Exception:  # a recorder of another torch version: the dump goes on without the note
        return None


def _python_call(frame):
    """The innermost torch.distributed entry point on the stack (`all_reduce`), else None."""
    for f in introspect.outward(frame, 40):
        code = f.f_code
        if code.co_name in _CALLS and "/torch/distributed/" in code.co_filename.replace("\\", "/") and \
                code.co_name != "wait":
            return code.co_name
    return None


def _under_site(frame):
    return any(site in f.f_code.co_filename.replace("\\", "/") for f in introspect.outward(frame, 40) for site in _SITES)


def _recorder():
    """The recorder's JSON as a dict ({} where it is off or absent), read at most once per FRESH s."""
    now = time.monotonic()
    if _read[1] is not None and now - _read[0] < FRESH:
        return _read[1]
    c10d = sys.modules.get("torch._C._distributed_c10d")
    dump = getattr(c10d, "_dump_fr_trace_json", None) if c10d is not None else None
    data = {}
    if dump is not None:
        import json
        data = json.loads(dump(True, True))  # collectives, and only those not yet retired
    _read[:] = [now, data]
    return data


def _in_flight(ident):
    """(the oldest collective this thread issued that has not completed, or None; the group's last
    completed ordinal; its last issued ordinal; {group name: (desc, backend, ranks)}). The recorder
    retires an entry when its work completes; where it keeps no such flag, the group's status says."""
    data = _recorder()
    status = data.get("pg_status") or {}
    entries = [e for e in data.get("entries") or () if not e.get("is_p2p")]
    mine = [e for e in entries if str(e.get("thread_id")) == str(ident) and not _completed(e, status)]
    entry = min(mine, key=lambda e: e.get("record_id", 0)) if mine else None
    if entry is None:
        return None, None, None, _groups()
    group = [e for e in entries if e.get("pg_id") == entry.get("pg_id")]
    done = max((e.get("collective_seq_id", 0) for e in group if _completed(e, status)), default=None)
    issued = max(e.get("collective_seq_id", 0) for e in group)
    return entry, done, issued, _groups()


def _completed(entry, status):
    if "retired" in entry:
        return bool(entry["retired"])
    done = _int((status.get(str(entry.get("pg_id"))) or {}).get("last_completed_collective"))
    return done is not None and entry.get("collective_seq_id", 0) <= done


def _groups():
    """{group name: (description, backend, sorted global ranks)} from torch's own dicts."""
    c10d = vars(sys.modules[_C10D])
    names, ranks, pgs = c10d.get("_pg_names"), c10d.get("_pg_group_ranks"), c10d.get("_pg_map")
    out = {}
    if type(names) is not dict:
        return out
    for pg, name in list(names.items()):
        members = ranks.get(pg) if type(ranks) is dict else None
        backend = pgs.get(pg) if type(pgs) is dict else None
        out[str(name)] = (None, backend[0] if type(backend) is tuple and backend else None,
                          sorted(members) if type(members) is dict else None)
    return out


def _fields(call, entry, done, issued, groups):
    """The note's fields from the recorder's entry, else from the Python call alone."""
    # The training steps, where the marks counted any (they load runtime/progress.py): read, not
    # imported, so that the progress look that loads this module is not loaded by it.
    progress = sys.modules.get("earlylog.runtime.progress")
    step, ran_out = (progress.steps(), progress.resting()) if progress is not None else (None, False)
    if entry is None:
        group = _group_of_call(call)
        desc, backend, ranks = groups.get(group, (None, None, None))
        peer, seq, other = _p2p_counts(call)
        return (call, seq, group, None, backend, _ranks(ranks), None, 0, None, peer, other, step, ran_out)
    pg = entry.get("process_group") or [str(entry.get("pg_id")), None]
    desc, backend, ranks = groups.get(str(pg[0]), (None, None, None))
    op = (entry.get("profiling_name") or "?").partition(":")[2] or entry.get("profiling_name") or "?"
    seq = entry.get("collective_seq_id")
    created = entry.get("time_created_ns")
    age = max(0.0, time.time() - created / 1e9) if created else None
    pending = issued - seq if issued is not None and seq is not None and issued > seq else 0
    return (op, seq, str(pg[0]), pg[1] if pg[1] not in (None, "undefined") else None, backend, _ranks(ranks), age,
            pending, done, None, None, step, ran_out)


def _group_of_call(call):
    """The default group's name (the group a call without `group=` runs on)."""
    c10d = vars(sys.modules[_C10D])
    world = introspect.instance_dict(c10d.get("_world"))
    pg, names = world.get("_default_pg"), c10d.get("_pg_names")
    return str(names.get(pg)) if type(names) is dict and pg in names else None


def _p2p_counts(call):
    """(peer, this call's count with it, the other call's count with it) for a send or recv the
    wrap counted, else Nones: `recv #3 from rank 0` after rank 0's 2 sends were received."""
    if call not in P2P:
        return None, None, None
    mine = [peer for (c, peer) in P2P_COUNTS if c == call]
    if len(mine) != 1 or mine[0] is None:
        return None, None, None  # several peers, or any source: the stack's own line says which
    peer = mine[0]
    return str(peer), P2P_COUNTS.get((call, peer), 0), P2P_COUNTS.get(("recv" if call == "send" else "send", peer), 0)


def _ranks(ranks):
    return ",".join(map(str, ranks)) if ranks else None


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
