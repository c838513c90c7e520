# What earlylog.pth (and an `earlylog install`ed hook) runs once EARLYLOG is set; the env check
# itself sits in the generated line, ahead of this code, so an unset EARLYLOG costs one lookup.
# It runs under exec() with two globals: RUNTIME, a folder holding a private copy of the
# earlylog package (None when pip installed it), and ORIGIN, which hook started it.
# Edit this file, then regenerate the line: python -m earlylog.cli.pthline --write
import sys
try:
    if RUNTIME and "earlylog" not in sys.modules:
        # Load the private copy by location, so the user's sys.path stays as it was.
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "earlylog", RUNTIME + "/earlylog/__init__.py",
            submodule_search_locations=[RUNTIME + "/earlylog"])
        module = importlib.util.module_from_spec(spec)
        sys.modules["earlylog"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["earlylog"]
            raise
    from earlylog.runtime import boot
except ImportError:
    # A stale .pth left after an uninstall must never break Python: one line, then go on.
    sys.stderr.write("earlylog: EARLYLOG is set but the earlylog package cannot be imported;"
                     " a stale earlylog .pth file is left in site-packages\n")
except BaseException as exc:
    # Never let an exception reach the application.
    sys.stderr.write("earlylog: could not load (%r); the program runs without it\n" % (exc,))
else:
    boot.start(ORIGIN)
