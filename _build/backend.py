"""PEP 517 backend: setuptools' own, plus the wheel-root files earlylog needs.
setuptools cannot place a file at the root of a wheel for both regular and PEP 660 editable
builds, so this adds earlylog.pth and earlylog.start (and, to regular wheels, the
sitecustomize template) to the finished wheel and rewrites its RECORD. It never changes
anything else setuptools built."""
import base64
import hashlib
import os
import zipfile

from setuptools import build_meta as _orig
from setuptools.build_meta import *  # noqa: F401,F403  (the hooks we do not change)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), "rb") as f:
        return f.read()


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _add_files(wheel_path, extra):
    """Rewrite the wheel with `extra` ({archive name: bytes}) added and RECORD updated."""
    tmp = wheel_path + ".tmp"
    with zipfile.ZipFile(wheel_path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for item in src.infolist():
            if item.filename != record_name and item.filename not in extra:
                dst.writestr(item, src.read(item.filename))
        record = [line for line in src.read(record_name).decode().splitlines()
                  if line and line.split(",")[0] not in extra and line.split(",")[0] != record_name]
        for name, data in sorted(extra.items()):
            dst.writestr(name, data)
            record.append(_record_line(name, data))
        record.append(record_name + ",,")
        dst.writestr(record_name, "\n".join(record) + "\n")
    os.replace(tmp, wheel_path)


def _root_files():
    return {"earlylog.pth": _read("_build", "earlylog.pth"),
            "earlylog.start": _read("_build", "earlylog.start")}


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = _orig.build_wheel(wheel_directory, config_settings, metadata_directory)
    extra = _root_files()
    extra["earlylog/_template/sitecustomize.py"] = _read("sitecustomize_template", "sitecustomize.py")
    _add_files(os.path.join(wheel_directory, name), extra)
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = _orig.build_editable(wheel_directory, config_settings, metadata_directory)
    _add_files(os.path.join(wheel_directory, name), _root_files())
    return name
