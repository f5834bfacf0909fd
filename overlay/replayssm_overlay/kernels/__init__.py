"""The overlay's GDN fold kernels (Triton, `gdn_fold`), their ahead-of-time build for sm_90 (`aot`,
`aot_modules`, `aot_manifest`, the `kernels` CLI) and the loader of the prebuilt binaries (`loader`)."""
