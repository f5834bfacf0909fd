"""The ahead-of-time build of the CUDA commit kernel: runs when the image is built, never inside the server.

`build.py` compiles `kernels/gdn_fold.cu` with NVRTC for sm_90 and writes the artifact folder, and
`cli.py` is `replayssm-overlay kernels build`. What the node reads (the manifest format, the loader) is
in `replayssm_overlay.kernels`; nothing there, in `fold.py` or in `hooks/` imports this package
(`tests/test_layout_imports.py` checks it). How it works: `README.md` here.
"""
