"""Make PyPI's torchvision 0.28.0 importable beside a CPU build of torch, in the test venv only.

torchvision's meta registrations for two C++ operators (nms, qnms) run unguarded at import time and fail
when the CUDA build's C++ ops are absent ("operator torchvision::nms does not exist"). SGLang 0.5.19
imports torchvision unconditionally, so without this no SGLang module imports on a CPU machine. This
script wraps those two registrations in a check for torchvision's compiled ops. Never shipped.
"""

import pathlib
import re
import sys

import importlib.util

spec = importlib.util.find_spec("torchvision")
if spec is None or not spec.submodule_search_locations:
    sys.exit("guard_torchvision_meta: torchvision is not installed")
path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
text = path.read_text()
marker = "# rso: guarded for CPU torch"
if marker in text:
    sys.exit(0)
pattern = re.compile(r"^@register_meta\(\"(nms|qnms)\"\)\n", re.M)
count = 0


def guard(match: re.Match) -> str:
    global count
    count += 1
    return f"{marker}\n@(register_meta(\"{match.group(1)}\") if _has_ops() else (lambda f: f))\n"


new = pattern.sub(guard, text)
if count == 0:
    new = re.sub(r"^@torch\.library\.register_fake\(\"torchvision::(nms|qnms)\"\)\n",
                 lambda m: f"{marker}\n@(torch.library.register_fake(\"torchvision::{m.group(1)}\") "
                 "if _has_ops() else (lambda f: f))\n", text, flags=re.M)
    count = new.count(marker)
if count == 0:
    sys.exit(f"guard_torchvision_meta: no nms/qnms registration found in {path}")
if "_has_ops" not in text:
    new = "from torchvision.extension import _has_ops\n" + new
path.write_text(new)
print(f"guard_torchvision_meta: guarded {count} registrations in {path}")
