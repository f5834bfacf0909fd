"""The overlay's fold kernels (Triton) and, on branch `aot`, their ahead-of-time build and loader."""
