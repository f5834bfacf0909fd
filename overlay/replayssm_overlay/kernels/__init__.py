"""Fold kernels of the overlay and their ahead-of-time build for sm_90 (see aot.py and loader.py)."""
