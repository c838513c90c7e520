"""Installed package versions read from *.dist-info folder names and METADATA, never by import.
It must not import the packages nor importlib.metadata (email, zipfile, csv: ~10 ms of GIL)."""
import os
import sys

from earlylog.runtime import fds

MAX_HEADERS = 256 << 10  # bytes read of a METADATA file (its headers come first) or of torch/version.py
# The packages whose versions explain most training start-up hangs and crashes, in log order.
WATCHED = ("torch", "torchvision", "torchaudio", "triton", "xformers", "flash-attn", "bitsandbytes",
           "deepspeed", "accelerate", "transformers", "diffusers", "peft", "safetensors", "numpy",
           "jax", "jaxlib", "tensorflow", "onnxruntime", "onnxruntime-gpu", "vllm",
           "nvidia-nccl-cu12", "nvidia-cudnn-cu12")


def normalize(name):
    return name.lower().replace("_", "-").replace(".", "-")


def installed(path=None):
    """{normalized name: (version, metadata folder)} for every distribution on sys.path;
    the first one on the path wins, as the import system would pick it."""
    found = {}
    for entry in path if path is not None else sys.path:
        try:
            names = fds.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            for suffix in (".dist-info", ".egg-info"):
                if name.endswith(suffix):
                    dist, _, version = name[:-len(suffix)].partition("-")
                    key = normalize(dist)
                    if key not in found:
                        found[key] = (version.split("-py")[0] or "?", os.path.join(entry or ".", name))
    return found


def requires(folder):
    """The Requires-Dist lines of a distribution's METADATA (headers only, not the long text)."""
    out = []
    for leaf in ("METADATA", "PKG-INFO"):
        data = fds.read(os.path.join(folder, leaf), MAX_HEADERS)
        if data is None:
            continue
        for line in data.decode("utf-8", "replace").splitlines():
            if not line.strip():
                break
            if line.startswith("Requires-Dist:"):
                out.append(line[len("Requires-Dist:"):].strip())
        return out
    return out


def requirement(line):
    """`torch (==2.5.1) ; extra == "x"` -> ('torch', '==2.5.1', 'extra == "x"')."""
    spec, _, marker = line.partition(";")
    spec = spec.strip()
    i = 0
    while i < len(spec) and (spec[i].isalnum() or spec[i] in "-_."):
        i += 1
    name = spec[:i]
    rest = spec[i:].strip()
    if rest.startswith("["):
        rest = rest[rest.find("]") + 1:].strip()
    return normalize(name), rest.strip("() ").replace(" ", ""), marker.strip()


def torch_build(found):
    """torch's build flavour from torch/version.py read as text: {'cuda': '12.4' or None, 'hip': ...}."""
    if "torch" not in found:
        return None
    site = os.path.dirname(found["torch"][1])
    data = fds.read(os.path.join(site, "torch", "version.py"), MAX_HEADERS)
    if data is None:
        return None
    build = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key = line.split("=")[0].split(":")[0].strip()
        if key in ("cuda", "hip") and "=" in line:
            value = line.split("=", 1)[1].strip().strip("'\"")
            build[key] = None if value == "None" else value
    return build


def base(version):
    """2.5.1+cu121 -> (2, 5, 1): the public version as numbers, for comparisons."""
    out = []
    for part in version.split("+")[0].split("."):
        digits = ""
        for c in part:
            if not c.isdigit():
                break
            digits += c
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)
