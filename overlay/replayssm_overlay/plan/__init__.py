"""`replayssm-overlay plan`: what ReplaySSM spec-verify saves per GPU, before a deploy, on a controller.

It runs where neither a GPU nor SGLang nor torch is installed (the Ansible controller, a laptop), so the
bytes are arithmetic over the model's config.json (`model`), SGLang's per-release pool layout
(`state_bytes`) and the GPU's memory budget (`fit`); tests/plan holds `state_bytes` equal, buffer by buffer,
to what each supported release's own pool builder allocates (`harness.pool_bytes`).
"""
