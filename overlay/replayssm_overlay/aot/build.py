"""Ahead-of-time build of the fold kernels for Hopper (sm_90) on a machine without a GPU.

A serving node must never JIT-compile the fold (1.3 s per specialization, at startup or under load).
So the image build compiles every specialization a deployment can ask for with the Triton of the
image's own Python, for an explicit `GPUTarget("cuda", 90, 32)`, and writes cubins, Triton's metadata,
the gcc-built launcher modules (see `launcher_modules.py`) and a manifest
(`replayssm_overlay.kernels.artifact_format`) that the loader checks on the node. No GPU, driver or torch is needed.

What gets compiled comes from a *provider*: a function `provider(hv, h, k, v, window)` that returns the
specializations of its kernels for one per-rank head shape and one verify window, each a dict (or an
object with the same attributes): `kernel` (the `@triton.jit` function), `constexprs` ({name: value}),
`signature` ({name: Triton type} for the other arguments, e.g. "*fp32", "i32"), `num_warps`,
`num_stages`, optionally `attrs` ({name: [["tt.divisibility", 16]]}; default: every pointer argument
16-byte aligned) and `label`. The default provider is the overlay's own fold kernel module.

Shapes come from model presets or explicit head counts. Under tensor parallelism each rank holds
HV/tp value heads and H/tp key heads, so every tp size must divide both; the build makes one shape per
tp size (default 1, 2, 4, 8).

Re-running with the same inputs rebuilds nothing; changed inputs rebuild only what changed, in a
staging folder that replaces the old one at the end, so a failed build leaves the old folder intact.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable

from replayssm_overlay import __version__ as OVERLAY_VERSION
from replayssm_overlay.cliutil import atomic_write_json, sha256_bytes, sha256_file
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.kernels import artifact_format as af

DEFAULT_PROVIDER = "replayssm_overlay.kernels.gdn_fold:aot_specializations"
DEFAULT_WINDOWS = tuple(range(2, 17))  # every verify window a DFLASH block or DSPARK gamma+1 can have
DEFAULT_TP_SIZES = (1, 2, 4, 8)


@dataclasses.dataclass(frozen=True)
class ModelPreset:
    """The GDN head geometry of a model (whole model, before tensor parallelism)."""

    hv: int  # linear_num_value_heads
    h: int  # linear_num_key_heads
    k: int  # linear_key_head_dim
    v: int  # linear_value_head_dim
    source: str


# Every supported model's GDN geometry, from its config.json (linear_num_value_heads, linear_num_key_heads,
# linear_key_head_dim, linear_value_head_dim); the GDN layer count is num_hidden_layers less the full
# attention layers (every 4th: full_attention_interval 4), which no kernel is specialized on.
PRESETS = {
    "qwen3-next-80b-a3b": ModelPreset(
        32, 16, 128, 128, "Qwen3NextConfig defaults in sglang 0.5.19 srt/configs/qwen3_next.py, the 80B-A3B's "
        "config (48 layers, 36 GDN)"),
    "qwen3.5-35b-a3b": ModelPreset(
        32, 16, 128, 128, "Qwen/Qwen3.5-35B-A3B model config (40 layers, 30 GDN; Qwen3.6-35B-A3B has the same)"),
    "qwen3.5-122b-a10b": ModelPreset(64, 16, 128, 128, "Qwen/Qwen3.5-122B-A10B model config (48 layers, 36 GDN)"),
    "qwen3.5-397b-a17b": ModelPreset(64, 16, 128, 128, "Qwen/Qwen3.5-397B-A17B model config (60 layers, 45 GDN)"),
    "qwen3.5-27b": ModelPreset(48, 16, 128, 128, "Qwen/Qwen3.5-27B model config (64 layers, 48 GDN)"),
}


@dataclasses.dataclass(frozen=True)
class HeadShape:
    """Per-rank GDN heads: what a fold kernel is specialized on."""

    hv: int
    h: int
    k: int
    v: int


def shapes_for(preset: ModelPreset, tp_sizes: Iterable[int]) -> list[HeadShape]:
    shapes = []
    for tp in tp_sizes:
        if tp < 1 or preset.hv % tp or preset.h % tp:
            raise OverlayError(
                f"tensor-parallel size {tp} does not divide the GDN heads (HV={preset.hv}, H={preset.h})",
                "choose --tp sizes that divide both head counts (for 32/16 heads: 1, 2, 4, 8 or 16)",
            )
        shapes.append(HeadShape(preset.hv // tp, preset.h // tp, preset.k, preset.v))
    return shapes


@dataclasses.dataclass
class Specialization:
    """One kernel binary to build, in the normalized form the manifest records."""

    fn: object  # triton JITFunction
    signature: dict  # every argument: Triton type, or "constexpr"
    constexprs: dict
    attrs: dict  # argument name -> [[attribute, value], ...]
    options: dict  # num_warps, num_stages
    label: str

    @property
    def kernel(self) -> str:
        return self.fn.__name__

    def identity(self, triton_version: str) -> str:
        """Stable id: the same inputs give the same id, so a re-run can reuse the binary."""
        payload = {
            "triton": triton_version,
            "target": af.TARGET,
            "kernel": self.kernel,
            "source_key": self.fn.cache_key,
            "signature": self.signature,
            "constexprs": self.constexprs,
            "attrs": self.attrs,
            "options": self.options,
        }
        return sha256_bytes(json.dumps(payload, sort_keys=True).encode())[:20]


def normalize(entry, label: str) -> Specialization:
    """Turn one provider entry into a Specialization; refuses incomplete or unrecordable entries."""
    get = entry.get if isinstance(entry, dict) else lambda name, default=None: getattr(entry, name, default)
    fn = get("kernel")
    if fn is None or not hasattr(fn, "arg_names"):
        raise OverlayError(f"specialization {label!r} has no @triton.jit `kernel`", "fix the kernel provider")
    constexprs = dict(get("constexprs") or {})
    given = dict(get("signature") or {})
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in given and given[name] != "constexpr":
            signature[name] = given[name]
        else:
            raise OverlayError(
                f"specialization {label!r} of {fn.__name__} gives neither a type nor a constexpr value for "
                f"argument {name!r}",
                "fix the kernel provider",
            )
    for name, value in constexprs.items():
        if name not in fn.arg_names:
            raise OverlayError(f"{fn.__name__} has no argument {name!r} (constexpr of {label!r})", "fix the provider")
        if not (value is None or isinstance(value, (bool, int, float, str))):
            raise OverlayError(
                f"constexpr {name}={value!r} of {label!r} cannot be recorded in a manifest",
                "use int, float, bool, str or None constexprs",
            )
    attrs = get("attrs")
    if attrs is None:
        attrs = {name: [["tt.divisibility", 16]] for name, ty in signature.items() if ty.startswith("*")}
    options = {"num_warps": int(get("num_warps", 4)), "num_stages": int(get("num_stages", 3))}
    return Specialization(fn, signature, constexprs, {k: [list(a) for a in v] for k, v in attrs.items()},
                          options, str(get("label") or label))


def load_provider(dotted: str) -> Callable:
    """`package.module:function` -> the function; a clear refusal if it is not there."""
    module_name, _, attr = dotted.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr or "aot_specializations")
    except (ImportError, AttributeError) as err:
        if isinstance(err, ImportError) and err.name == "triton":
            fix = "install the Triton the serving image uses into this Python (the build compiles with it)"
        else:
            fix = "build from a tree that has the overlay's fold kernel, or name another with --provider"
        raise OverlayError(f"kernel provider {dotted!r} is not available ({err})", fix) from err


def collect(provider: Callable, shapes: Iterable[HeadShape], windows: Iterable[int]) -> list[Specialization]:
    """Every specialization the provider asks for, once each."""
    import triton

    _require_compiler()

    seen, specs = set(), []
    for shape in shapes:
        for window in windows:
            where = f"HV={shape.hv} H={shape.h} K={shape.k} V={shape.v} window={window}"
            for index, entry in enumerate(provider(shape.hv, shape.h, shape.k, shape.v, window)):
                spec = normalize(entry, f"{where} #{index}")
                ident = spec.identity(triton.__version__)
                if ident not in seen:
                    seen.add(ident)
                    specs.append(spec)
    if not specs:
        raise OverlayError("the kernel provider returned no specializations", "check --model/--window")
    return specs


def build(out: Path, specs: list[Specialization], progress: Callable[[str], None] = print) -> dict:
    """Build (or reuse) every specialization into `out`; returns a summary for the CLI."""
    import triton

    _require_compiler()

    started = time.monotonic()
    out = Path(out).resolve()
    old = _existing(out)
    idents = [spec.identity(triton.__version__) for spec in specs]
    if old is not None and _up_to_date(old, out, idents):
        progress(f"up to date: {len(idents)} specialization(s) in {out}, nothing rebuilt")
        return {"out": str(out), "up_to_date": True, "compiled": 0, "reused": len(idents), "modules": 0}

    reusable = _reusable_specs(old, out) if old is not None else {}
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="rso-aot-") as tmp:
            tmp = Path(tmp)
            entries, compiled = {}, 0
            for number, (spec, ident) in enumerate(zip(specs, idents), 1):
                rel = Path("kernels", spec.kernel, ident)
                if ident in reusable:
                    shutil.copytree(out / rel, staging / rel)
                    files = reusable[ident]["files"]
                    progress(f"[{number}/{len(specs)}] reuse   {spec.kernel} {spec.label}")
                else:
                    progress(f"[{number}/{len(specs)}] compile {spec.kernel} {spec.label} for sm_{af.TARGET_ARCH}")
                    files = _compile(spec, tmp / "triton-cache", staging, rel)
                    compiled += 1
                entry = entries.setdefault(spec.kernel, _kernel_entry(spec))
                entry["specializations"].append(_spec_entry(spec, ident, files))
            progress("build launcher modules (gcc, fake libcuda) ...")
            modules = _build_modules(list(entries.values()), staging, tmp)
            cuda = _build_cuda(staging, progress)
            manifest = _manifest(list(entries.values()), modules, cuda, staging, time.monotonic() - started)
            atomic_write_json(staging / af.MANIFEST_NAME, manifest)
        _replace(out, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress(f"wrote {out}: {compiled} compiled, {len(specs) - compiled} reused, {len(modules)} module(s), "
             f"CUDA commit kernel {af.cuda_summary(cuda)}, {time.monotonic() - started:.1f} s")
    return {"out": str(out), "up_to_date": False, "compiled": compiled, "reused": len(specs) - compiled,
            "modules": len(modules), "cuda": af.cuda_summary(cuda)}


def _require_compiler() -> None:
    """Triton's interpreter, once on in a process, replaces parts of `triton.language`: nothing compiles."""
    import triton

    if triton.knobs.runtime.interpret:
        raise OverlayError("Triton's interpreter is on (TRITON_INTERPRET=1): this process cannot compile kernels",
                           "unset TRITON_INTERPRET and build again")


def _existing(out: Path) -> dict | None:
    """The old manifest, None for a new or empty folder; refuses to replace a folder that is not ours."""
    if not out.exists():
        if not out.parent.is_dir():
            raise OverlayError(f"{out.parent} does not exist", "create the parent folder or choose another --out")
        return None
    if not out.is_dir():
        raise OverlayError(f"{out} exists and is not a folder", "choose another --out")
    if not any(out.iterdir()):
        return None
    try:
        return af.read_manifest(out)
    except ValueError as err:
        raise OverlayError(
            f"{out} is not empty and is not a kernel artifact folder ({err}); the build would replace it",
            "choose a new or empty folder for --out, or remove this one yourself",
        ) from err


def _same_builder(old: dict) -> bool:
    import triton

    builder = old.get("builder", {})
    return (builder.get("triton"), builder.get("python"), builder.get("platform"), old.get("target")) == (
        triton.__version__, af.python_tag(), af.platform_key(), af.TARGET)


def _files_intact(out: Path, files: dict) -> bool:
    return all((out / rel).is_file() and sha256_file(out / rel) == digest for rel, digest in files.items())


def _up_to_date(old: dict, out: Path, idents: list[str]) -> bool:
    have = [s["id"] for k in old.get("kernels", []) for s in k["specializations"]]
    return (_same_builder(old) and old.get("overlay_version") == OVERLAY_VERSION and sorted(have) == sorted(idents)
            and _cuda_current(old.get("cuda")) and _files_intact(out, old.get("files", {})))


def _cuda_current(entry: dict | None) -> bool:
    """The folder's CUDA kernel was built from the installed source, or skipped and NVRTC is still missing."""
    from replayssm_overlay.kernels import nvrtc

    if not entry or entry.get("source_sha256") != sha256_file(nvrtc.SOURCE):
        return False
    if entry.get("file"):
        return True
    try:
        nvrtc.library()
    except nvrtc.NvrtcMissing:
        return True
    return False


def _reusable_specs(old: dict, out: Path) -> dict:
    if not _same_builder(old):
        return {}
    digests = old.get("files", {})
    reusable = {}
    for kernel in old.get("kernels", []):
        for spec in kernel["specializations"]:
            files = spec.get("files", {})
            if files and _files_intact(out, {p: digests.get(p) for p in files.values()}):
                reusable[spec["id"]] = spec
    return reusable


def _compile(spec: Specialization, cache: Path, staging: Path, rel: Path) -> dict:
    """Compile one specialization for sm_90 into a private Triton cache; copy the cubin and metadata."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    index = {name: i for i, name in enumerate(spec.fn.arg_names)}
    attrs = {(index[name],): values for name, values in spec.attrs.items()}
    source = ASTSource(spec.fn, spec.signature, spec.constexprs, attrs)
    target = GPUTarget(af.TARGET["backend"], af.TARGET["arch"], af.TARGET["warp_size"])
    with triton.knobs.cache.scope():
        triton.knobs.cache.dir = str(cache)
        compiled = triton.compile(source, target=target, options=dict(spec.options))
    if compiled.metadata.target.arch != af.TARGET_ARCH:
        raise OverlayError(f"Triton compiled {spec.kernel} for {compiled.metadata.target}", "report this as a bug")
    (staging / rel).mkdir(parents=True)
    files = {}
    for ext in ("cubin", "json"):
        name = f"{spec.kernel}.{ext}"
        shutil.copyfile(compiled.metadata_group[name], staging / rel / name)
        files[ext] = str(rel / name)
    return files


def _kernel_entry(spec: Specialization) -> dict:
    return {
        "name": spec.kernel,
        "module": getattr(spec.fn, "__module__", None),
        "source_key": spec.fn.cache_key,
        "arg_names": list(spec.fn.arg_names),
        "specializations": [],
    }


def _spec_entry(spec: Specialization, ident: str, files: dict) -> dict:
    return {"id": ident, "label": spec.label, "signature": spec.signature, "constexprs": spec.constexprs,
            "attrs": spec.attrs, "options": spec.options, "files": files}


def _build_modules(kernels: list[dict], staging: Path, tmp: Path) -> list[dict]:
    """Run `launcher_modules.py` in a child process and copy what it built into `staging/modules`."""
    request = {"cache_dir": str(tmp / "module-cache"), "kernels": [
        {"arg_names": k["arg_names"], "signature": s["signature"], "constexprs": s["constexprs"],
         "metadata": str(staging / s["files"]["json"])}
        for k in kernels for s in k["specializations"]
    ]}
    request_path = tmp / "modules-request.json"
    request_path.write_text(json.dumps(request))
    script = Path(__file__).with_name("launcher_modules.py")
    run = subprocess.run([sys.executable, str(script), str(request_path)], capture_output=True, text=True)
    if run.returncode != 0:
        raise OverlayError(
            f"building Triton's launcher modules failed (exit {run.returncode}):\n{run.stderr.strip()[-2000:]}",
            "the build needs gcc and the Python headers of this Python (python3-dev)",
        )
    modules = []
    for module in json.loads(run.stdout.strip().splitlines()[-1]):
        rel = Path("modules", module["key"], Path(module["path"]).name)
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(module["path"], staging / rel)
        modules.append({"name": module["name"], "key": module["key"], "file": str(rel)})
    return modules


CUDA_CUBIN = Path("cuda", "gdn_fold.cubin")


def _build_cuda(staging: Path, progress: Callable[[str], None]) -> dict:
    """The CUDA commit kernel (`kernels/gdn_fold.cu`) compiled with NVRTC into `staging/cuda/`: its manifest
    entry. Without NVRTC the entry says why it was skipped, and the node commits with the Triton kernels."""
    from replayssm_overlay.kernels import cuda_fold, nvrtc

    entry = {"source_sha256": sha256_file(nvrtc.SOURCE), "columns": cuda_fold.COLUMNS}
    try:
        lib_version = nvrtc.version()
    except nvrtc.NvrtcMissing as err:
        progress(f"skip    the CUDA commit kernel: {err.what} ({err.fix}); the Triton kernels will commit")
        return {**entry, "skipped": err.what}
    progress(f"compile the CUDA commit kernel (gdn_fold.cu) with NVRTC {lib_version} for {nvrtc.ARCH}")
    cubin, report = nvrtc.build_fold()
    (staging / CUDA_CUBIN).parent.mkdir(parents=True, exist_ok=True)
    (staging / CUDA_CUBIN).write_bytes(cubin)
    return {**entry, "file": str(CUDA_CUBIN), **report}


def _manifest(kernels: list[dict], modules: list[dict], cuda: dict, staging: Path, seconds: float) -> dict:
    import triton

    files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file())
    return {
        "schema": af.SCHEMA,
        "overlay_version": OVERLAY_VERSION,
        "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "build_seconds": round(seconds, 1),
        "builder": {"triton": triton.__version__, "python": af.python_tag(), "platform": af.platform_key(),
                    "hostname": socket.gethostname()},
        "target": af.TARGET,
        "kernels": kernels,
        "modules": modules,
        "cuda": cuda,
        "files": {rel: sha256_file(staging / rel) for rel in files},
    }


def _replace(out: Path, staging: Path) -> None:
    """Swap the finished staging folder in; the old folder is removed only after the swap."""
    os.chmod(staging, 0o755)
    if not out.exists():
        os.rename(staging, out)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.rename(out, retired / "old")
    os.rename(staging, out)
    shutil.rmtree(retired, ignore_errors=True)
