"""The ahead-of-time build of the fold kernels: runs when the image is built, never inside the server.

`build.py` compiles every fold specialization for sm_90 and writes the artifact folder,
`launcher_modules.py` makes Triton's gcc-built launcher modules in a child process, and `cli.py` is
`replayssm-overlay kernels build`. What the node reads (the manifest format, the loader) is in
`replayssm_overlay.kernels`; nothing there, in `fold.py` or in `hooks/` imports this package
(`tests/test_layout_imports.py` checks it). How it works and what was measured: `README.md` here.
"""
