"""An executor's task that raised: concurrent.futures keeps the exception in the task's Future
and prints nothing, so a program that never reads that Future waits for what the task would have
done with no word of why (docs/design.md#a-task-that-raised). Loaded when concurrent.futures is
(hooks._hook_futures), it wraps Future.set_exception: after the original, an `exception:` record
(records.in_task) with the traceback, to the log file only (the program printed nothing either),
for the first MAX of a process. It never changes what set_exception does, raises or returns."""
import sys
from _thread import get_ident

from earlylog.grammar import records
from earlylog.runtime import state, threads

MAX = 20  # failed tasks recorded per process: a program may fail tasks by the thousand on purpose
_told = [0]


def watch(log_exception):
    """Wrap Future.set_exception; log_exception: raised.log_exception, which writes the record."""
    future = sys.modules["concurrent.futures._base"].Future
    original = vars(future).get("set_exception")
    if original is None or getattr(original, "_earlylog", False):
        return  # a fork child inherits the wrapper

    def set_exception(self, exception):
        original(self, exception)
        if _told[0] < MAX and state.logger is not None:
            _told[0] += 1
            try:
                name = threads.program_thread_name(get_ident()) or "?"
                log_exception(records.in_task(name), type(exception), exception, exception.__traceback__,
                              console=False)
            except Exception:
                pass

    set_exception.__name__ = set_exception.__qualname__ = original.__qualname__
    set_exception.__doc__, set_exception.__module__ = original.__doc__, original.__module__
    set_exception.__wrapped__, set_exception._earlylog = original, True
    future.set_exception = set_exception
