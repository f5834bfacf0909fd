"""The loader: which folder, the node checks and their reasons, the source check, and which prebuilt
binary a launch picks (or why none). CPU only: launching a cubin needs the GPU (test_aot_gpu.py).
Triton is imported inside tests, never at collection (see test_aot_build.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.kernels import artifact_format as af
from replayssm_overlay.kernels import loader
from tests.aot.aot_helpers import child_env

HERE = Path(__file__).resolve().parent


def facts(**change):
    import triton

    base = dict(triton=triton.__version__, python=af.python_tag(), platform=af.platform_key(), arch=90)
    return loader.NodeFacts(**{**base, **change})


def refusal(folder, **change) -> str:
    with pytest.raises(loader.ArtifactRefused) as caught:
        loader.ArtifactSet.open(folder, facts(**change))
    assert isinstance(caught.value, OverlayError) and "kernels build" in caught.value.fix
    return caught.value.what


def test_folder_comes_from_argument_then_env_then_default(monkeypatch, tmp_path):
    monkeypatch.delenv(loader.ENV_DIR, raising=False)
    assert loader.artifact_dir() == Path("/opt/replayssm-overlay/kernels")
    monkeypatch.setenv(loader.ENV_DIR, str(tmp_path))
    assert loader.artifact_dir() == tmp_path
    assert loader.artifact_dir(tmp_path / "x") == tmp_path / "x"


def test_matching_node_opens(built):
    artifacts = loader.ArtifactSet.open(built, facts())
    assert artifacts.folder == built
    assert af.summary(artifacts.manifest)["kernels"] == {"gdn_replayssm_exact_fold_kernel": 2}


def test_refuses_another_triton_version(built):
    import triton

    assert f"built with Triton {triton.__version__}, this node has Triton 0.0.1" in refusal(built, triton="0.0.1")


def test_refuses_another_python(built):
    assert "this is cp399" in refusal(built, python="cp399")


def test_refuses_another_arch_and_a_node_without_gpu(built):
    assert "built for sm_90, this GPU is sm_80" in refusal(built, arch=80)
    assert "no CUDA device is visible" in refusal(built, arch=None)


def test_refuses_a_changed_file(artifacts):
    cubin = next(artifacts.glob("kernels/*/*/*.cubin"))
    data = bytearray(cubin.read_bytes())
    data[100] ^= 1
    cubin.write_bytes(bytes(data))
    rel = cubin.relative_to(artifacts)
    assert f"file {rel} does not match its sha256" in refusal(artifacts)


def test_refuses_a_missing_file_folder_or_manifest(artifacts, tmp_path):
    module = next(artifacts.glob("modules/*/*.so"))
    module.unlink()
    assert f"file {module.relative_to(artifacts)} is missing" in refusal(artifacts)
    assert "does not exist" in refusal(tmp_path / "nowhere")
    (artifacts / af.MANIFEST_NAME).unlink()
    assert "no manifest.json" in refusal(artifacts)


def test_refuses_a_manifest_of_another_schema(artifacts):
    path = artifacts / af.MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["schema"] = "something-else/9"
    path.write_text(json.dumps(manifest))
    assert "expected 'replayssm-overlay-kernels/1'" in refusal(artifacts)


def test_kernel_must_be_built_from_the_installed_source(built, fold_module, tmp_path):
    import triton

    artifacts = loader.ArtifactSet.open(built, facts())
    assert artifacts.kernel(fold_module.gdn_replayssm_exact_fold_kernel).name == "gdn_replayssm_exact_fold_kernel"
    # The same file with one line added above the kernel: another Triton source key.
    from benchmarks.aot_sglang_fold import fold_file, load_fold_module

    shifted = tmp_path / "gdn_replayssm_spec_fold.py"
    shifted.write_text("# moved down one line\n" + fold_file().read_text())
    other = load_fold_module(shifted).gdn_replayssm_exact_fold_kernel
    with pytest.raises(loader.ArtifactRefused, match="another version of its source"):
        artifacts.kernel(other)

    def unrelated_kernel(x):
        pass

    with triton.knobs.runtime.scope():  # compiled, even if this session runs Triton's interpreter
        triton.knobs.runtime.interpret = False
        unrelated_kernel = triton.jit(unrelated_kernel)
    with pytest.raises(loader.ArtifactRefused, match="no prebuilt binaries for kernel unrelated_kernel"):
        artifacts.kernel(unrelated_kernel)


class _Recorder:
    """Stands in for Triton's CompiledKernel in CPU tests: records the launch instead of running a cubin."""

    def __init__(self, binary):
        self.binary = binary
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args: self.calls.append((grid, args))


def _meta_pool(layers=30, slots=8, hv=32, h=16, k=128, v=128, window=16):
    meta = dict(device="meta")
    return dict(
        checkpoint_state=torch.empty(layers, slots, hv, v, k, dtype=torch.float32, **meta),
        rawv_cache=torch.empty(layers, slots, hv, window, v, dtype=torch.bfloat16, **meta),
        rawk_cache=torch.empty(layers, slots, h, window, k, dtype=torch.bfloat16, **meta),
        g_cache=torch.empty(layers, slots, hv, window, dtype=torch.float32, **meta),
        beta_cache=torch.empty(layers, slots, hv, window, dtype=torch.float32, **meta),
        ssm_state_indices=torch.empty(4, dtype=torch.int32, **meta),
        accept_lens=torch.empty(4, dtype=torch.int32, **meta),
        max_cache_len=window,
        num_k_heads=h,
    )


@pytest.fixture
def routed(built, fold_module, monkeypatch):
    """SGLang's real wrapper, with its JIT kernel swapped for the prebuilt one, launching into recorders."""
    prebuilt = loader.ArtifactSet.open(built, facts()).kernel(fold_module.gdn_replayssm_exact_fold_kernel)
    recorders = {}

    def compiled(binary):
        return recorders.setdefault(binary.spec["id"], _Recorder(binary))

    monkeypatch.setattr(loader._Binary, "compiled", compiled)
    monkeypatch.setattr(fold_module, "gdn_replayssm_exact_fold_kernel", prebuilt)
    return fold_module.commit_gdn_replayssm_fold_all_layers, recorders


def test_launch_picks_the_binary_the_arguments_satisfy(routed):
    fold, recorders = routed
    pool = _meta_pool()
    fold(**pool)
    fold(**pool, mamba_track_indices=pool["ssm_state_indices"], mamba_steps_to_track=pool["accept_lens"])
    (plain,) = [r for r in recorders.values() if not r.binary.spec["constexprs"]["HAS_TRACK"]]
    (track,) = [r for r in recorders.values() if r.binary.spec["constexprs"]["HAS_TRACK"]]
    (grid, args), = plain.calls
    assert grid == (4, 4, 32 * 30) and len(args) == 33 and args[0] is pool["checkpoint_state"]
    assert len(track.calls) == 1


@pytest.mark.parametrize(
    "change, why",
    [
        (dict(hv=16), "HV"),  # another head count: other constexpr strides and HV
        (dict(window=8), "window"),
        (dict(slots=4), "slot count: SGLang's kernel takes the layer stride as a constexpr"),
    ],
)
def test_launch_refuses_shapes_that_were_not_prebuilt(routed, change, why):
    fold, recorders = routed
    with pytest.raises(loader.ArtifactRefused, match="no prebuilt gdn_replayssm_exact_fold_kernel"):
        fold(**_meta_pool(**change))
    assert not recorders, why


def test_launch_refuses_wrong_dtypes_and_misaligned_pointers(routed):
    fold, recorders = routed
    pool = _meta_pool()
    pool["accept_lens"] = torch.empty(4, dtype=torch.int64, device="meta")
    with pytest.raises(loader.ArtifactRefused):
        fold(**pool)
    pool = _meta_pool()
    pool["ssm_state_indices"] = torch.zeros(6, dtype=torch.int32)[1:5]  # 4-byte offset: breaks 16-byte alignment
    pool["accept_lens"] = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(loader.ArtifactRefused):
        fold(**pool)
    pool["ssm_state_indices"] = torch.zeros(4, dtype=torch.int32)
    fold(**pool)
    assert sum(len(r.calls) for r in recorders.values()) == 1


def test_launcher_modules_are_served_from_the_folder_without_gcc(built, tmp_path):
    """In a child (it fakes libcuda): Triton's own launcher setup finds every module it needs in the
    folder under the keys it computes, and with the modules gone the loader refuses instead of building."""
    env = dict(child_env(), TRITON_CACHE_DIR=str(tmp_path / "cache"))
    probe = [sys.executable, str(HERE / "modules_probe.py")]
    run = subprocess.run(probe + [str(built), str(built)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == {"served": True, "cache_files": 0}

    bare = tmp_path / "bare"
    bare.mkdir()
    run = subprocess.run(probe + [str(bare), str(built)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["served"] is False and "is not among the prebuilt ones" in result["refusal"]


def test_launcher_gets_the_signature_in_argument_order(built):
    """The manifest's JSON keeps keys sorted; Triton's launcher reads the signature's values in order as
    the argument order, so the loader must rebuild it in argument order (a sorted one launches garbage)."""
    kernel = af.read_manifest(built)["kernels"][0]
    spec = kernel["specializations"][0]
    assert list(spec["signature"]) != kernel["arg_names"]  # as stored: sorted
    source = af.launcher_source(kernel["arg_names"], spec["signature"], spec["constexprs"])
    assert list(source.signature) == kernel["arg_names"]
    assert list(source.signature.values())[:2] == ["*fp32", "*bf16"]


class _Tripwire:
    def __getattr__(self, name):
        raise AssertionError(f"triton.runtime.driver.active.{name} touched outside prebuilt_modules")


def test_first_launch_touches_triton_s_driver_only_inside_the_module_scope(built, fold_module, monkeypatch):
    """Seen on the H200: looking up the device through Triton's driver before loading created the driver
    outside `prebuilt_modules`, so Triton built cuda_utils with gcc into the user's cache."""
    import triton.runtime

    prebuilt = loader.ArtifactSet.open(built, facts()).kernel(fold_module.gdn_replayssm_exact_fold_kernel)
    loaded = []

    def fake_load(folder, arg_names, spec):
        loaded.append(spec["id"])
        return _Recorder(None)

    monkeypatch.setattr(loader, "_current_device", lambda: 0)
    monkeypatch.setattr(loader, "_load", fake_load)
    monkeypatch.setattr(triton.runtime.driver, "_active", _Tripwire())
    monkeypatch.setattr(fold_module, "gdn_replayssm_exact_fold_kernel", prebuilt)
    fold_module.commit_gdn_replayssm_fold_all_layers(**_meta_pool())
    assert len(loaded) == 1


def test_refuses_kernels_running_under_triton_s_interpreter(built):
    import triton

    def gdn_replayssm_exact_fold_kernel(x):
        pass

    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = True
        interpreted = triton.jit(gdn_replayssm_exact_fold_kernel)
    with pytest.raises(loader.ArtifactRefused, match="interpreter"):
        loader.ArtifactSet.open(built, facts()).kernel(interpreted)


def test_the_cuda_kernels_summary_says_when_ptxas_reported_no_registers():
    """An NVRTC whose log has no ptxas lines leaves the registers unknown: the build's summary says so
    instead of "0 registers per thread" (which reads like a broken kernel)."""
    entry = {"file": "cuda/gdn_fold.cubin", "nvrtc": "13.0", "arch": "sm_90"}
    unknown = dict(entry, ptxas={"gdn_fold_conv2": {"registers": None, "spill_bytes": 0}})
    assert af.cuda_summary(unknown).endswith("registers per thread not reported by this NVRTC")
    assert af.cuda_summary(dict(entry, ptxas={})).endswith("not reported by this NVRTC")
    known = dict(entry, ptxas={"gdn_fold_conv2": {"registers": 128}, "gdn_fold_conv2_track": {"registers": 168}})
    assert af.cuda_summary(known).endswith(", 128-168 registers per thread")
