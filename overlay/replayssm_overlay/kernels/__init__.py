"""What runs on the serving node: the overlay's fold kernels (Triton), the prebuilt-kernel loader and
the artifact folder's format; `kernels check|status` inspect it. Their ahead-of-time build is
`replayssm_overlay.aot`, which nothing here imports."""
