"""What runs on the serving node: the overlay's commit kernels (CUDA, the served default, and its Triton
twin), the loader of the prebuilt CUDA kernel and the artifact folder's format; `kernels check|status`
inspect it. Its ahead-of-time build is `replayssm_overlay.aot`, which nothing here imports."""
