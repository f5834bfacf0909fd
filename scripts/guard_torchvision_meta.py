"""Make PyPI's torchvision 0.28.0 importable beside a CPU build of torch, in the test venv only.

torchvision's fake-tensor registrations for two C++ operators (nms, qnms) run unguarded at import time
and fail when the CUDA build's C++ ops are absent ("operator torchvision::nms does not exist"). SGLang
0.5.19 imports torchvision unconditionally, so without this no SGLang module imports on a CPU machine.
This script makes those two registrations conditional on torchvision's compiled ops. Never shipped.
"""

import importlib.util
import pathlib
import re
import sys

MARKER = "# rso: guarded for CPU torch"
spec = importlib.util.find_spec("torchvision")
if spec is None or not spec.submodule_search_locations:
    sys.exit("guard_torchvision_meta: torchvision is not installed")
path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
text = path.read_text()
if MARKER in text:
    sys.exit(0)
decorator = re.compile(r'^@torch\.library\.register_fake\("torchvision::(nms|qnms)"\)\n', re.M)
guarded = (
    MARKER + "\n"
    '@(torch.library.register_fake("torchvision::\\1") '
    'if __import__("torchvision.extension", fromlist=["_has_ops"])._has_ops() else (lambda f: f))\n'
)
new, count = decorator.subn(guarded, text)
if count != 2:
    sys.exit(f"guard_torchvision_meta: expected 2 nms/qnms registrations in {path}, found {count}")
path.write_text(new)
print(f"guard_torchvision_meta: guarded {count} registrations in {path}")
