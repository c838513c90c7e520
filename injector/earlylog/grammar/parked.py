"""Where a thread waits for work, read from its stack: one rule for the runtime (runtime/stuck.py,
at a stall, keeps an idle process's stall line off the console) and the reader (read/idle.py calls
the process idle), so that the two never judge a stack differently. A stack here is a list of
(path, function), innermost first. It looks at no process and reads no file: stacks in, words out."""
import os

# Where a thread parks between pieces of work, and the report's words for it; the frames inside
# such a frame may only be the waiting itself (PLUMBING). A server's accept() with a timeout polls
# in socket.py.
WORK = (("socketserver.py", "serve_forever", "waiting for work in serve_forever"),
        ("grpc/_server.py", "wait_for_termination", "waiting for work in a gRPC server"),
        ("concurrent/futures/thread.py", "_worker", "waiting for work in a thread pool"),
        ("concurrent/futures/process.py", "_process_worker", "waiting for work in a process pool"),
        ("multiprocessing/pool.py", "worker", "waiting for tasks in a multiprocessing pool"),
        ("torch/utils/data/_utils/worker.py", "_worker_loop", "waiting for work in a DataLoader worker"),
        ("ray/_private/worker.py", "main_loop", "waiting for tasks in Ray's worker loop"),
        ("socket.py", "accept", "waiting for a connection in accept"),
        # multiprocessing's own helper processes, started with spawn and forkserver: they wait for
        # the program's messages all their life
        ("multiprocessing/resource_tracker.py", "main", "waiting for work in multiprocessing's resource tracker"),
        ("multiprocessing/forkserver.py", "main", "waiting for requests in multiprocessing's fork server"))
QUEUES = ("queue.py", "multiprocessing/queues.py")
PLUMBING = ("selectors.py", "threading.py", "queue.py", "multiprocessing/queues.py",
            "multiprocessing/connection.py", "multiprocessing/synchronize.py", "socket.py")
# asyncio awaits that mean a task waits for work: a server, a queue, a sleep.
ASYNC_WORK = (("asyncio/base_events.py", "serve_forever"), ("asyncio/queues.py", "get"),
              ("asyncio/tasks.py", "sleep"), ("grpc/aio/_server.py", "wait_for_termination"))
# A library's own run loop sleeping between rounds (Ray's monitor, torchrun's agent) is known by
# the name of the sleeping function: one of these words between underscores (`run`, `_run`,
# `monitor_loop`). A library sleeping elsewhere (a file lock's retry loop) is waiting.
_RUN_LOOP_WORDS = ("run", "loop", "forever", "serve", "monitor")
_CHILD = "multiprocessing/process.py"  # a multiprocessing child's main thread runs its target here


def is_file(path, suffix):
    """Is this the file `suffix` names (a file name, or the end of a path)?"""
    return path == suffix or path.endswith("/" + suffix) or path.endswith(os.sep + suffix)


def run_loop(function):
    """Is `function` named as a library's run loop?"""
    return any(word in _RUN_LOOP_WORDS for word in function.split("_"))


def waits_for_work(stack, main):
    """The words for a thread parked between pieces of work (a server's, a pool worker's, a queue
    consumer's wait, with nothing but the waiting inside it), else None. main: the process's main
    thread, whose wait on a queue is a wait for a result that may never come, not for work (but in
    a multiprocessing child, whose main thread runs the child's target)."""
    consumer = not main or any(is_file(path, _CHILD) for path, _func in stack)
    inside = lambda i: all(any(is_file(p, s) for s in PLUMBING) for p, _f in stack[:i])  # noqa: E731
    # A pool's or a server's own wait first: its worker waits on a queue inside it.
    for i, (path, func) in enumerate(stack):
        words = "waiting for work in serve_forever" if func == "serve_forever" else next(
            (words for suffix, name, words in WORK if func == name and is_file(path, suffix)), None)
        if words is not None and inside(i):
            return words
    for i, (path, func) in enumerate(stack):
        if consumer and func == "get" and any(is_file(path, q) for q in QUEUES) and inside(i):
            return "waiting for work in queue.get"
    return None


def awaits_work(chain):
    """Does a task whose await chain ([(path, function)]) is `chain` await a server, a queue or a
    sleep: work to come?"""
    return any(func == name and is_file(path, suffix) for path, func in chain for suffix, name in ASYNC_WORK)
