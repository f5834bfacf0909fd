"""ReplaySSM spec-verify for DFLASH and DSPARK on hybrid GDN models, as an overlay on SGLang 0.5.19.

Importing this package is cheap on purpose: SGLang's patched files import it on their hot paths, and the
command line runs where SGLang may not even import. Heavy modules (torch, triton, sglang) are imported
lazily inside the functions that need them.
"""

__version__ = "0.1.0"
#: the distribution's name (pyproject.toml's [project] name; tests/patcher/test_wheel_name.py keeps them equal)
DISTRIBUTION = "sglang-replayssm-overlay"
#: the file name of the wheel of any version, as a shell pattern (what the docs and messages tell people to
#: install: `pip install --no-deps` of the file `python -m build --wheel` or `pip wheel` writes)
WHEEL_PATTERN = DISTRIBUTION.replace("-", "_") + "-*-py3-none-any.whl"
