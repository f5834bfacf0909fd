"""The test nodes' Python: compiled code of zip-imported sources kept between runs (tests/deploy/fleet.py).

Why: every Ansible module a rollout runs on a node is a fresh `python3` that imports Ansible's module_utils
from the module's zip (AnsiballZ), and Python's zipimport compiles a zip's sources anew each time (it never
writes bytecode). That compiling is about 0.08 s of the 0.2 s of CPU a module run costs here, and the fleet
tests run thousands of them on a 2-core machine. A real host pays it too; the tests only save the time: the
same sources run, compiled by the same `compile()`, and a source whose bytes changed is compiled afresh.

Active only where ANSIBALLZ_CODE_CACHE names a folder (the test nodes' sshd sets it, with PYTHONPATH
pointing here). Entries are keyed by the interpreter's cache tag and the source's SHA-1, written to a
temporary name and renamed, so runs side by side never read half an entry; an entry that cannot be read is
compiled again. A cached code object gets the current zip path as its file name, as SourceLoader does for
a .pyc, so tracebacks name the zip the module ran from. Nothing here ships; it lives under tests/.
"""

import _imp
import hashlib
import marshal
import os
import sys
import zipimport

CACHE = os.environ.get("ANSIBALLZ_CODE_CACHE")
_compile_source = zipimport._compile_source


def _store(entry, code):
    partial = f"{entry}.{os.getpid()}"
    try:
        with open(partial, "wb") as f:
            marshal.dump(code, f)
        os.replace(partial, entry)
    except OSError:
        pass  # a full or read-only disk costs the next run a compile, never this run


def _compile_cached(pathname, source):
    entry = os.path.join(CACHE, f"{sys.implementation.cache_tag}-{hashlib.sha1(source).hexdigest()}")
    try:
        with open(entry, "rb") as f:
            code = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        code = _compile_source(pathname, source)
        _store(entry, code)
        return code
    _imp._fix_co_filename(code, pathname)
    return code


if CACHE and os.path.isdir(CACHE):
    zipimport._compile_source = _compile_cached
