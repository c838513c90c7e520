"""Turns the readable hook source (pth_hook.py) into the one-line .pth and the .start file.
It is build- and install-time code: it must never run inside a user's process start-up."""
import os
import sys

from earlylog import OFF_WORDS

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the source checkout: injector/earlylog/cli
START_ENTRY = "earlylog:site_hook"


COPY_BEGIN, COPY_END = "# runtime copy: begin", "# runtime copy: end"
FAILED = "# failed: begin"


def hook_source(copy=False):
    """(the hook's code, its FAILED code), without comments or blank lines, as exec() will run
    them; the hook without the lines that load a private runtime copy unless `copy`."""
    with open(os.path.join(HERE, "pth_hook.py"), encoding="utf-8") as f:
        lines = [line.rstrip() for line in f]
    hook, failed = [], []
    kept, skipping = hook, False
    for line in lines:
        marker = line.strip()
        if marker in (COPY_BEGIN, COPY_END):
            skipping = marker == COPY_BEGIN and not copy
        elif marker == FAILED:
            kept = failed
        elif marker and not marker.startswith("#") and not skipping:
            kept.append(line)
    return "\n".join(hook) + "\n", "\n".join(failed) + "\n"


def render(runtime=None, origin="pth"):
    """One `import` line: it checks EARLYLOG before compiling or importing anything of ours."""
    hook, failed = hook_source(copy=runtime is not None)
    # FAILED's text goes in as a string literal: compiled only when it runs, and a literal in the
    # hook costs a line that EARLYLOG leaves off less to compile than another global would.
    hook = hook.replace("exec(FAILED)", "exec(%r)" % failed)
    scope = {"ORIGIN": origin} if runtime is None else {"RUNTIME": runtime, "ORIGIN": origin}
    return ("import os;os.environ.get('EARLYLOG', '').strip().lower() in %r or exec(%r, %r)\n"
            % (OFF_WORDS, hook, scope))


def render_start():
    """PEP 829 start file: on Python 3.15+ it replaces the .pth import line of the same name."""
    return START_ENTRY + "\n"


def main(argv=None):
    """Write the committed copies that the build backend puts at the wheel root."""
    argv = sys.argv[1:] if argv is None else argv
    out = os.path.join(ROOT, "_build")
    files = {"earlylog.pth": render(), "earlylog.start": render_start()}
    for name, text in files.items():
        path = os.path.join(out, name)
        if "--write" in argv:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            sys.stdout.write("%s: %s" % (name, text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
