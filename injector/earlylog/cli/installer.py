"""`earlylog install | uninstall | status`: the hook in another interpreter's site-packages.
It writes only earlylog_hook.pth and the earlylog_hook/ folder, records them in a manifest,
and removes exactly those; it never runs pip or touches anything else there."""
import json
import os
import shutil
import subprocess
import sys

from earlylog import __version__
from earlylog.cli import bundle, pthline
from earlylog.cli.errors import CliError

HOOK_PTH = "earlylog_hook.pth"
HOOK_DIR = "earlylog_hook"
MANIFEST = "MANIFEST.json"

# Runs inside the target interpreter; written for Python 2 too, so that we can say it is too old.
_INSPECT = r"""
import sys, os, json
try:
    import sysconfig
    purelib = sysconfig.get_paths()["purelib"]
except Exception:
    purelib = None
try:
    import importlib.util
    spec = importlib.util.find_spec("sitecustomize")
    sitecustom = spec.origin if spec else None
except Exception:
    sitecustom = None
try:
    import site
    sitedirs = site.getsitepackages()
except Exception:
    sitedirs = []
exe_dir = os.path.dirname(sys.executable)
pth_files = [n for n in (os.listdir(exe_dir) if os.path.isdir(exe_dir) else []) if n.endswith("._pth")]
sys.stdout.write(json.dumps({
    "version": list(sys.version_info[:3]), "executable": sys.executable, "purelib": purelib,
    "sitedirs": sitedirs, "prefix": sys.prefix, "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "sitecustomize": sitecustom, "frozen": bool(getattr(sys, "frozen", False)),
    "underscore_pth": pth_files, "no_site": sys.flags.no_site,
    "earlylog_loaded": "earlylog.runtime.boot" in sys.modules,
}))
"""


def _quiet_env(extra=None):
    env = dict(os.environ)
    env.pop("EARLYLOG", None)
    env.update(extra or {})
    return env


def target_python(args):
    """The interpreter named by --python or --venv, or the one running this command."""
    if getattr(args, "venv", None):
        if os.path.isfile(args.venv):
            raise CliError("%s is an interpreter, not a virtual environment folder; pass --python %s"
                           % (args.venv, args.venv))
        exe = _venv_python(args.venv)
        if exe is None:
            raise CliError("%s is not a virtual environment (no bin/python in it)" % args.venv)
        return exe
    if getattr(args, "python", None):
        if os.path.isdir(args.python):
            inside = _venv_python(args.python)
            raise CliError("%s is a folder, not an interpreter; pass %s" % (
                args.python, "--venv %s (or --python %s)" % (args.python, inside) if inside
                else "the python executable itself, e.g. --python %s" % os.path.join(args.python, "bin", "python")))
        exe = shutil.which(args.python) or args.python
        if not os.path.exists(exe):
            raise CliError("the interpreter %s does not exist" % args.python)
        return exe
    return sys.executable


def _venv_python(folder):
    for name in ("bin/python", "bin/python3", "Scripts/python.exe"):
        exe = os.path.join(folder, name)
        if os.path.exists(exe):
            return exe
    return None


def inspect(exe, extra_env=None):
    """Facts about an interpreter, asked of that interpreter itself."""
    try:
        proc = subprocess.run([exe, "-c", _INSPECT], capture_output=True, text=True, timeout=60,
                              env=_quiet_env(extra_env))
    except OSError as exc:
        raise CliError("cannot run %s (%s)" % (exe, exc.strerror or exc))
    except subprocess.TimeoutExpired:
        raise CliError("%s did not answer within 60 s" % exe)
    try:
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise CliError("%s did not answer like a Python interpreter: %s"
                       % (exe, (proc.stderr.strip().splitlines() or ["no output"])[-1]))
    if tuple(facts["version"][:2]) < (3, 9):
        raise CliError("%s is Python %s; earlylog needs Python 3.9 or newer"
                       % (exe, ".".join(map(str, facts["version"]))))
    if not facts["purelib"]:
        raise CliError("%s has no site-packages folder that earlylog could use" % exe)
    return facts


def _manifest_path(site):
    return os.path.join(site, HOOK_DIR, MANIFEST)


def _read_manifest(site):
    try:
        with open(_manifest_path(site), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _remove(site, manifest):
    """Remove what a manifest lists, then the folders it made if they are left empty."""
    for rel in manifest.get("files", []):
        try:
            os.remove(os.path.join(site, rel))
        except FileNotFoundError:
            pass
    for rel in sorted(manifest.get("dirs", []), key=len, reverse=True):
        pycache = os.path.join(site, rel, "__pycache__")
        shutil.rmtree(pycache, ignore_errors=True)
        try:
            os.rmdir(os.path.join(site, rel))
        except OSError:
            pass


def install(args):
    exe = target_python(args)
    facts = inspect(exe)
    site = facts["purelib"]
    if not os.access(site, os.W_OK):
        raise CliError("cannot write to %s (read-only site-packages); use a virtualenv or run as its owner"
                       % site)
    old = _read_manifest(site)
    if old:
        _remove(site, old)
    version_dir = os.path.join(HOOK_DIR, __version__)
    written = [os.path.relpath(p, site) for p in bundle.copy_runtime(os.path.join(site, version_dir))]
    with open(os.path.join(site, HOOK_PTH), "w", encoding="utf-8") as f:
        f.write(pthline.render(runtime=os.path.join(site, version_dir), origin="earlylog install"))
    manifest = {"version": __version__, "files": [HOOK_PTH] + written + [os.path.join(HOOK_DIR, MANIFEST)],
                "dirs": [HOOK_DIR, version_dir, os.path.join(version_dir, "earlylog")] +
                        [os.path.join(version_dir, "earlylog", folder) for folder in bundle.FOLDERS]}
    with open(_manifest_path(site), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    problem = _build_startpack(exe, os.path.join(site, version_dir))
    print("earlylog %s installed into %s (%s); set EARLYLOG=1 to turn it on"
          % (__version__, site, exe) + (" (replaced %s)" % old["version"] if old else ""))
    if problem:
        print("note: no start pack was built (%s); start-up imports its modules one by one" % problem)
    return 0


_BUILD_PACK = "import sys; sys.path.insert(0, sys.argv[1]); from earlylog.runtime import startpack; startpack.build()"


def _build_startpack(exe, runtime):
    """The start pack of the runtime copy, built by the interpreter that will read it (its magic
    number and cache tag: docs/design.md#the-start-pack), in its runtime/__pycache__, which the
    manifest's folders cover. Returns None, or what went wrong: a start builds it then."""
    try:
        proc = subprocess.run([exe, "-I", "-c", _BUILD_PACK, runtime], capture_output=True, text=True,
                              timeout=60, env=_quiet_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[-1]
    return None


def uninstall(args):
    exe = target_python(args)
    site = inspect(exe)["purelib"]
    manifest = _read_manifest(site)
    if manifest is None:
        if os.path.isfile(os.path.join(site, "earlylog.pth")):
            raise CliError("earlylog was installed into %s by pip, not by `earlylog install`; remove it with "
                           "`%s -m pip uninstall earlylog`" % (site, exe))
        print("earlylog is not installed by `earlylog install` in %s; nothing to remove" % site)
        return 0
    _remove(site, manifest)
    print("earlylog %s removed from %s" % (manifest.get("version", "?"), site))
    return 0


def status(args):
    """Is the hook there, will it run, and where do logs go; each as one plain line."""
    from earlylog.grammar import records
    exe = target_python(args)
    facts = inspect(exe)
    lines = ["interpreter: %s (Python %s)" % (facts["executable"], ".".join(map(str, facts["version"])))]
    hooks = []
    for site in [facts["purelib"]] + [d for d in facts["sitedirs"] if d != facts["purelib"]]:
        for name in ("earlylog.pth", HOOK_PTH):
            if os.path.isfile(os.path.join(site, name)):
                hooks.append(os.path.join(site, name))
    lines.append("hook: " + (", ".join(hooks) if hooks else
                             "not installed (run `earlylog install --python %s`, or use `earlylog run`)" % exe))
    check = inspect(exe, {"EARLYLOG": "1", "EARLYLOG_CONSOLE": "off", "EARLYLOG_PROBES": "0",
                          "EARLYLOG_FILE": os.devnull})
    lines.append("will it run: " + ("yes, EARLYLOG=1 starts it in `%s -c ...`" % exe if check["earlylog_loaded"]
                                    else "no, EARLYLOG=1 did not start it in this interpreter"))
    if facts["underscore_pth"]:
        lines.append("warning: %s beside the executable switches off site and .pth files; add `import site` to it"
                     % ", ".join(facts["underscore_pth"]))
    if facts["frozen"]:
        lines.append("warning: this is a frozen application; .pth files do not run in it")
    if facts["sitecustomize"]:
        lines.append("note: a sitecustomize is present (%s); the .pth hook runs before it, the template chains to it"
                     % facts["sitecustomize"])
    lines.append("note: `python -S` (no site) skips .pth files, and with them earlylog; -E, -s and -I keep the"
                 " installed hook, but -E and -I ignore the PYTHONPATH that `earlylog run`/`env` use")
    lines.append("logs: %s" % (os.environ.get("EARLYLOG_FILE") or os.environ.get("EARLYLOG_DIR")
                               or records.default_base() + "/<run>/ (a new folder per top-level process)"))
    print("\n".join(lines))
    return 0
