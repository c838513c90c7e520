"""Library marks: a table of hang-prone library calls, each wrapped as a phase when its module loads,
and the training heartbeat (each optimizer step and DataLoader batch, told to runtime/progress.py).
It must never import a library the program did not, nor change what a wrapped call does or returns."""
import os
import sys

from earlylog.grammar import records
from earlylog.runtime import phases, progress, redact, state, stdio

# The marks module loads after start-up (with the first third-party package), so the state's
# `installed` flag cannot tell whether this lineage registered the fork check yet.
_fork_check = False
_cuda_fork_warned = False
_failed = [0]         # id() of the last exception a marked call logged
_step_hook = False    # torch's optimizer step hook is registered (a fork child inherits it)


def start(logger):
    """Mark what is already imported (a fork child, a sitecustomize that imported torch)."""
    global _fork_check
    for module_name in TABLE:
        if module_name in sys.modules:
            apply(module_name)
    if not _fork_check and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_cuda_before_fork)
        _fork_check = True


def apply(module_name):
    """Wrap every entry of one freshly imported module (a callable entry installs a library hook
    itself); a missing name is skipped (debug line)."""
    module = sys.modules.get(module_name)
    for entry in TABLE[module_name]:
        try:
            entry(module) if callable(entry) else _wrap(module, *entry)
        except Exception as exc:  # another library version: not an error, just nothing to mark
            if state.logger.config.debug:
                state.logger.event("earlylog", "no mark for %s.%s: %r" % (
                    module_name, getattr(entry, "__name__", None) or entry[0], exc), console=False)


def _wrap(module, attr, name, detail, waiting, lines, after, beat):
    import functools
    *path, last = attr.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    raw = vars(owner)[last] if isinstance(owner, type) else getattr(owner, last)
    original = raw.__func__ if isinstance(raw, classmethod) else raw
    if getattr(original, "_earlylog_mark", False):
        return  # a fork child inherits the marks of its parent
    seen = [False]

    @functools.wraps(original)
    def marked(*args, **kwargs):
        try:
            text = detail(original, args, kwargs)
        except Exception:
            text = ""
        if text is None:
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                if beat is not None and type(exc) is StopIteration:
                    progress.rest()  # an epoch ended: evaluation and checkpoints are no missed step
                stdio.hide_frame(exc)
                raise
            if beat is not None:
                progress.beat(beat)
            return result
        quiet = lines == "errors" or (lines == "first" and seen[0])
        seen[0] = True
        token = phases.begin(name, text, waiting, quiet)
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            # A failure is worth one line, from the innermost marked call it passes through (torch
            # re-raises a dead worker's error as another); an id, not the exception, so its frames
            # (and their tensors) are not kept alive.
            phases.end(token, exc, quiet and _failed[0] in (id(exc), id(exc.__context__)))
            _failed[0] = id(exc)
            if beat is not None and type(exc) is StopIteration:
                progress.rest()
            stdio.hide_frame(exc)
            raise
        phases.end(token, None, quiet)
        if after is not None:
            _note(after)
        if beat is not None:
            progress.beat(beat)
        return result

    marked._earlylog_mark = True
    setattr(owner, last, classmethod(marked) if isinstance(raw, classmethod) else marked)
    # torch.distributed.init_process_group is defined in distributed_c10d and called there by
    # name too; rebinding it at home keeps pickling by reference and internal callers marked.
    home = sys.modules.get(getattr(original, "__module__", None) or "")
    if (not path and home is not None and home.__name__.startswith(module.__name__ + ".")
            and getattr(home, last, None) is original):
        setattr(home, last, marked)


def _note(after):
    try:
        text = after()
    except Exception as exc:
        text = "(%r)" % exc
    if text:
        state.logger.event("note", text)


def _warn(text):
    state.logger.event("WARNING", text)


def _arg(original, args, kwargs, name, default=None):
    """One argument of a call by parameter name, positional or keyword, without `inspect`."""
    if name in kwargs:
        return kwargs[name]
    while hasattr(original, "__wrapped__"):  # torch decorates init_process_group with (*args, **kwargs)
        original = original.__wrapped__
    code = original.__code__
    names = code.co_varnames[:code.co_argcount]
    if name in names and names.index(name) < len(args):
        return args[names.index(name)]
    return default


def _plain(original, args, kwargs):
    return ""


def _file(parameter):
    """Detail of a loader call: the file and its size, or the kind of object read from."""
    def detail(original, args, kwargs):
        f = _arg(original, args, kwargs, parameter)
        if isinstance(f, (str, bytes, os.PathLike)):
            path = os.fsdecode(f)
            try:
                return "%s (%.1f MB)" % (path, os.stat(path).st_size / 1e6)
            except OSError:
                return path
        return "from a %s" % type(f).__name__
    return detail


# --- torch.cuda: the first use initialises the driver and every visible device --------------------

def _cuda_init(original, args, kwargs):
    cuda = sys.modules.get("torch.cuda")
    return None if cuda is None or cuda.is_initialized() else ""


def _cuda_devices():
    cuda = sys.modules["torch.cuda"]
    names = [cuda.get_device_name(i) for i in range(cuda.device_count())]
    return "CUDA ready: %d device%s: %s" % (len(names), "" if len(names) == 1 else "s", ", ".join(names))


def _cuda_before_fork():
    """A child forked after CUDA initialised cannot use CUDA; say so once, in the parent's log."""
    global _cuda_fork_warned
    try:
        cuda = sys.modules.get("torch.cuda")
        if cuda is None or _cuda_fork_warned or state.logger is None or not cuda.is_initialized():
            return
        _cuda_fork_warned = True
        _warn("fork() after CUDA was initialised in this process: the child cannot use CUDA "
              "('Cannot re-initialize CUDA in forked subprocess'); start children with 'spawn' "
              "(multiprocessing.set_start_method('spawn'), DataLoader(multiprocessing_context='spawn'))")
    except Exception:
        pass


# --- torch.distributed: the rendezvous, where a rank waits for peers that never come ---------------

def _init_process_group(original, args, kwargs):
    env = os.environ
    backend = _arg(original, args, kwargs, "backend") or "default"
    store = _arg(original, args, kwargs, "store")
    init = _arg(original, args, kwargs, "init_method") or ("store" if store is not None else "env://")
    rank = _arg(original, args, kwargs, "rank", -1)
    rank = env.get("RANK", "?") if rank in (-1, None) else rank
    world = _arg(original, args, kwargs, "world_size", -1)
    world = env.get("WORLD_SIZE", "?") if world in (-1, None) else world
    timeout = _arg(original, args, kwargs, "timeout")
    host, port = _master(init)
    if host:
        _check_master(host, port, str(rank))
    return records.init_words(backend, redact.url(str(init)), rank, world, "%s:%s" % (host, port) if host else "-",
                              "%g s" % timeout.total_seconds() if timeout is not None else "default")


def _master(init):
    """(host, port) of the rendezvous: tcp://host:port, or MASTER_ADDR/MASTER_PORT for env://."""
    if init.startswith("tcp://"):
        netloc = init[6:].split("/")[0].split("?")[0]
        host, _, port = netloc.rpartition(":")
        return host.strip("[]"), port
    if init.startswith("env://"):
        return os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT", "")
    return None, None


def _check_master(host, port, rank):
    """Warn before the rendezvous waits out its timeout on an address that cannot work."""
    if not port.isdigit():
        return
    # Under torchrun the agent serves the store (TORCHELASTIC_USE_AGENT_STORE) and holds the port.
    if rank == "0" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        _check_port_free(int(port))  # before torch binds it: a check after would race torch's bind
    from earlylog.runtime import threads
    threads.start("earlylog-master-check", _check_reachable, host, int(port))


def _check_port_free(port):
    import errno
    import socket
    from earlylog.runtime import fds
    try:
        probe = fds.socket(socket.AF_INET, socket.SOCK_STREAM)  # high: a stale close never hits it
    except OSError:
        return
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore's own server
        probe.bind(("", port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            _warn("MASTER_PORT %d is already in use on this machine: rank 0 cannot serve the "
                  "rendezvous there (another job, or a stale process of an earlier run, holds it)" % port)
    finally:
        probe.close()


def _check_reachable(host, port):
    import socket
    try:
        _connect(host, port, 3)
    except ConnectionRefusedError:
        pass  # nobody listens yet: normal while rank 0 is still starting
    except socket.gaierror as exc:
        _warn("MASTER_ADDR %s does not resolve (%s): every rank will wait until the timeout" % (host, exc))
    except (OSError, ValueError, OverflowError) as exc:  # MASTER_ADDR=a..b, MASTER_PORT=70000
        _warn("MASTER_ADDR:PORT %s:%d is unreachable from this machine (%s): this rank will wait "
              "until the timeout; check the address, routes and firewalls" % (host, port, exc.strerror or exc))


def _connect(host, port, timeout):
    """socket.create_connection((host, port), timeout).close(), with each socket at a high number
    (fds.socket): this runs in a thread of ours, where a low number may be one the program just
    freed and closes again (docs/design.md#our-fds-sit-high)."""
    import socket
    from earlylog.runtime import fds
    error = None
    for family, kind, proto, _name, address in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = fds.socket(family, kind)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            return
        except OSError as exc:
            error = exc
        finally:
            sock.close()
    raise error or OSError("getaddrinfo returns an empty list")


def _new_group(original, args, kwargs):
    ranks = _arg(original, args, kwargs, "ranks")
    return "ranks=%s" % (list(ranks) if ranks is not None else "all")


def _p2p_counts(module):
    """Each send and recv counted per peer (runtime/collectives.py): gloo's Flight Recorder leaves
    point-to-point calls out, and a count is what tells which side's send is missing when both
    ranks wait in recv. The one wrap of a collective call: a dict write, then the call, unchanged."""
    from earlylog.runtime import collectives
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    # send and recv call isend and irecv (torch 2.x): those two see every point-to-point call once.
    for name, call, peer in (("isend", "send", "dst"), ("irecv", "recv", "src")):
        original = getattr(c10d, name, None)
        if original is None or getattr(original, "_earlylog_mark", False):
            continue
        counted = _counting(original, call, peer, collectives.P2P_COUNTS)
        for owner in (c10d, module):
            if getattr(owner, name, None) is original:
                setattr(owner, name, counted)


def _counting(original, call, parameter, counts):
    """original, counting each call in counts[(call, peer)] first: a dict write, inline (a call per
    point-to-point call is what this costs, ~0.3 us beside a gloo send's tens: docs/performance.md)."""
    import functools
    group_parameter = "group_" + parameter

    @functools.wraps(original)
    def counted(*args, **kwargs):
        try:
            peer = args[1] if len(args) > 1 else kwargs.get(parameter)
            key = (call, peer if peer is not None else kwargs.get(group_parameter))
            counts[key] = counts.get(key, 0) + 1
        except Exception:  # never into the program's call
            pass
        try:
            return original(*args, **kwargs)
        except BaseException as exc:
            stdio.hide_frame(exc)  # a failed send's traceback reads as without earlylog
            raise

    counted._earlylog_mark = True
    return counted


# --- torch.utils.data: worker processes, where fork meets threads -----------------------------------

def _loader_iter(original, args, kwargs):
    loader = args[0]
    workers = loader.num_workers
    if not workers:
        return None  # no worker processes: nothing hang-prone beyond the user's own dataset
    import multiprocessing
    context = loader.multiprocessing_context
    method = (context.get_start_method() if context is not None else
              multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0])
    if loader.persistent_workers and getattr(loader, "_iterator", None) is not None:
        return None  # a later epoch reuses the running workers: nothing starts
    # Forking while other threads run is the watchdog's `fork:` line, written at the fork itself.
    return "num_workers=%d context=%s pin_memory=%s persistent_workers=%s" % (
        workers, method, loader.pin_memory, loader.persistent_workers)


def _first_batch(original, args, kwargs):
    it = args[0]
    if getattr(it, "_num_yielded", 1) or not getattr(it, "_num_workers", 0):
        return None  # every later batch passes straight through
    return "from %d workers" % it._num_workers


def _worker_loop(original, args, kwargs):
    return "%s of %s (pid %d)" % (_arg(original, args, kwargs, "worker_id", "?"),
                                  _arg(original, args, kwargs, "num_workers", "?"), os.getpid())


def _compile_frame(original, args, kwargs):
    code = _arg(original, args, kwargs, "code")
    return "%s %s:%d" % (code.co_name, os.path.basename(code.co_filename), code.co_firstlineno)


def _pretrained(original, args, kwargs):
    return "%s %s" % (args[0].__name__, _arg(original, args, kwargs, "pretrained_model_name_or_path", ""))


def _worker_batches(module):
    """Each batch a DataLoader worker process fetched is its heartbeat: a worker that reads slowly but
    keeps delivering is making progress, however long one sample takes (runtime/progress.py). In the
    main process (num_workers=0) the loader's own batches beat already: a fetch there is left alone."""
    for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
        owner = getattr(module, name, None)
        original = vars(owner).get("fetch") if owner is not None else None
        if original is None or getattr(original, "_earlylog_mark", False):
            continue
        setattr(owner, "fetch", _fetching(original))


def _fetching(original):
    import functools

    @functools.wraps(original)
    def fetch(self, possibly_batched_index):
        try:
            result = original(self, possibly_batched_index)
        except BaseException as exc:
            stdio.hide_frame(exc)  # the worker's traceback, which torch sends on, reads as without earlylog
            raise
        try:
            # torch's worker module sets its _worker_info in a worker process only (imported after fetch).
            worker = sys.modules.get("torch.utils.data._utils.worker")
            if worker is not None and worker._worker_info is not None:
                progress.beat("batch")
        except Exception:  # never into the program's batch
            pass
        return result

    fetch._earlylog_mark = True
    return fetch


# --- the training heartbeat: runtime/progress.py judges a run by its steps -----------------------

def _optimizer_steps(module):
    """Every optimizer's step() is a training step, through torch's global post-hook (torch 2.0+):
    subclasses override step(), so no wrap of Optimizer.step would see them."""
    global _step_hook
    if not _step_hook:
        module.register_optimizer_step_post_hook(_stepped)
        _step_hook = True


def _stepped(optimizer, args, kwargs):
    try:
        progress.beat("step")
    except Exception:  # never into the program's step
        pass


def _mark(attr, name, detail=_plain, waiting="", lines="all", after=None, beat=None):
    return (attr, name, detail, waiting, lines, after, beat)


# Imported module -> what to mark in it. Adding a library is one entry; a name a version lacks is
# skipped. `waiting`: the call waits on other processes (dumps and a reminder say so);
# `lines`: "all" calls write begin/end lines, only the "first" (a barrier may run every step), or
# only failures ("errors": a batch fetch, where a dead worker shows); `after`: a note on success;
# `beat`: each successful call is a training heartbeat of that kind (runtime/progress.py). A
# callable entry installs a hook of the library's own instead of a wrap.
TABLE = {
    "torch": (_mark("load", "torch.load", _file("f")),),
    "torch.cuda": (_mark("_lazy_init", "CUDA initialisation", _cuda_init, after=_cuda_devices),),
    "torch.distributed": (
        _mark("init_process_group", "init_process_group", _init_process_group, "for peers"),
        _mark("barrier", "barrier", waiting="for peers", lines="first"),
        _mark("new_group", "new_group", _new_group, "for peers"),
        _mark("destroy_process_group", "destroy_process_group"),
        _p2p_counts,
    ),
    "torch.utils.data.dataloader": (
        _mark("DataLoader.__iter__", "DataLoader iterator", _loader_iter),
        _mark("_BaseDataLoaderIter.__next__", "DataLoader first batch", _first_batch, lines="first", beat="batch"),
        _mark("_MultiProcessingDataLoaderIter._try_get_data", "DataLoader batch", lines="errors"),
    ),
    "torch.optim.optimizer": (_optimizer_steps,),
    "torch.utils.data._utils.worker": (_mark("_worker_loop", "DataLoader worker", _worker_loop),),
    "torch.utils.data._utils.fetch": (_worker_batches,),
    # torch's SIGCHLD handler: where a worker killed by a signal (the OOM killer) is noticed.
    "torch.utils.data._utils.signal_handling": (
        _mark("_error_if_any_worker_fails", "DataLoader workers", lines="errors"),),
    "torch._dynamo.convert_frame": (_mark("_compile", "torch.compile", _compile_frame),),
    "safetensors.torch": (_mark("load_file", "safetensors load_file", _file("filename")),),
    "accelerate.accelerator": (_mark("Accelerator.__init__", "accelerate.Accelerator()"),),
    "transformers.modeling_utils": (_mark("PreTrainedModel.from_pretrained", "from_pretrained", _pretrained),),
    "transformers.models.auto.auto_factory": (
        _mark("_BaseAutoModelClass.from_pretrained", "from_pretrained", _pretrained),),
}
