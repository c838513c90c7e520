"""earlylog's sitecustomize, for interpreters where earlylog is not installed.

Put the folder holding this file and a copy of the `earlylog` package on PYTHONPATH
(`earlylog run` and `earlylog env` make such a folder and do this). At start-up it:
  1. starts earlylog when EARLYLOG is set (anything but 0, empty, false, off, no);
  2. imports the sitecustomize that this file hides (conda's, Debian's, a user's), with this
     folder taken off sys.path for the import and put back afterwards, so its side effects
     still happen and `sitecustomize` in sys.modules is that module, as without earlylog.
Each step is wrapped: a failure prints one line on stderr and Python starts as usual.
"""
import os
import sys


def _say(sentence):
    try:
        sys.stderr.write("earlylog: %s\n" % sentence)
    except Exception:
        pass


def _start_earlylog():
    try:
        # The runtime beside this file, found through PYTHONPATH; its package face is tiny and
        # holds the one definition of the words that keep earlylog off.
        import earlylog
        if not earlylog.enabled():
            return
        from earlylog import runtime
    except ImportError as exc:
        _say("EARLYLOG is set but no earlylog runtime sits beside %s (%s)" % (__file__, exc))
        return
    runtime.start("sitecustomize")


def _chain_hidden_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    this = sys.modules.get(__name__)
    saved_path = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    del sys.modules[__name__]
    try:
        import sitecustomize  # noqa: F401  (the next one on sys.path, if any)
    except ImportError as exc:
        if exc.name != "sitecustomize":
            _say("the sitecustomize hidden by earlylog failed: %r" % (exc,))
    except Exception as exc:  # as site.py does: report it, and start anyway
        _say("the sitecustomize hidden by earlylog failed: %r" % (exc,))
    finally:
        if "sitecustomize" not in sys.modules:
            sys.modules[__name__] = this
        # Put our folder back where it was; keep any change the hidden module made.
        for index, entry in enumerate(saved_path):
            if os.path.abspath(entry or os.curdir) == here and entry not in sys.path:
                sys.path.insert(index, entry)


try:
    _start_earlylog()
except Exception as _exc:  # never let an exception reach the application
    _say("could not start (%r); the program runs without it" % (_exc,))
try:
    _chain_hidden_sitecustomize()
except Exception as _exc:
    _say("could not chain-load the hidden sitecustomize (%r)" % (_exc,))
