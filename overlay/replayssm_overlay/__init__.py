"""ReplaySSM spec-verify for DFLASH and DSPARK on hybrid GDN models, as an overlay on SGLang 0.5.19.

Importing this package is cheap on purpose: SGLang's patched files import it on their hot paths, and the
command line runs where SGLang may not even import. Heavy modules (torch, triton, sglang) are imported
lazily inside the functions that need them.
"""

__version__ = "0.1.0"
