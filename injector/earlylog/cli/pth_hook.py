# What earlylog.pth (and an `earlylog install`ed hook) runs once EARLYLOG is set; the env check
# itself sits in the generated line, ahead of this code, so an unset EARLYLOG costs one lookup.
# It runs under exec() with the global ORIGIN, which hook started it, and for a private copy of
# the earlylog package (`earlylog install`) RUNTIME, the folder holding it; FAILED is the text
# after the `failed: begin` marker, put in as a string literal. A pip-installed line leaves out
# the lines between the `runtime copy` markers: exec() compiles its text in every process that
# has EARLYLOG set, and each line left out is start-up time saved.
# Edit this file, then regenerate the line: python -m earlylog.cli.pthline --write
try:
    # runtime copy: begin
    import sys
    if "earlylog" not in sys.modules:
        # Load the private copy by location, so the user's sys.path stays as it was.
        # The import system's own functions (what importlib.util hands out), already loaded:
        # importing importlib.util would load four more modules at every start.
        import _frozen_importlib, _frozen_importlib_external
        spec = _frozen_importlib_external.spec_from_file_location(
            "earlylog", RUNTIME + "/earlylog/__init__.py",
            submodule_search_locations=[RUNTIME + "/earlylog"])
        module = _frozen_importlib.module_from_spec(spec)
        sys.modules["earlylog"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["earlylog"]
            raise
    # runtime copy: end
    from earlylog import runtime
except BaseException as exc:
    # Never let an exception reach the application: one line (FAILED, below), then go on.
    exec(FAILED)
else:
    runtime.start(ORIGIN)
# failed: begin
# Compiled only when the import failed, so that a start compiles the short text above.
import sys
if isinstance(exc, ImportError):
    # A stale .pth left after an uninstall must never break Python.
    sys.stderr.write("earlylog: EARLYLOG is set but the earlylog package cannot be imported;"
                     " a stale earlylog .pth file is left in site-packages\n")
else:
    sys.stderr.write("earlylog: could not load (%r); the program runs without it\n" % (exc,))
