"""Launch prebuilt fold kernels without any Triton compilation, or refuse with the reason.

The folder comes from `RSO_KERNEL_DIR`, else `/opt/replayssm-overlay/kernels` (where the image puts
it). `ArtifactSet.open()` checks its manifest against this node: the Triton version and Python tag it
was built with, the platform, the GPU's compute capability (`torch.cuda.get_device_capability`) and
the sha256 of every file. `ArtifactSet.kernel(jit_fn)` then checks that the installed kernel's source
(Triton's `cache_key`) is the one the binaries were built from, and returns a `PrebuiltKernel` that is
launched like a JIT function: `prebuilt[grid](*args, **constexprs, num_warps=..., num_stages=...)`.

Each launch picks the binary whose specialization the arguments satisfy (equal constexprs, tensor
dtypes, 16-byte alignment and divisibility wherever the binary assumes it) and runs it through Triton's
`CompiledKernel`, built from the cubin and metadata: `triton.compile` is never called, so no Triton
compilation can happen. Triton's gcc-built launcher modules are served from the folder by a read-only
cache manager, with building switched off, while a binary is loaded (process-wide Triton settings,
restored at once; load from one thread). Anything that does not match raises `ArtifactRefused`
(an `OverlayError`); the caller (`fold.py`) then falls back to SGLang's JIT fold and logs why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from pathlib import Path

from replayssm_overlay.cliutil import sha256_file
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.kernels import artifact_format as af

ENV_DIR = "RSO_KERNEL_DIR"
DEFAULT_DIR = Path("/opt/replayssm-overlay/kernels")
_REBUILD = "rebuild them on this node's image: replayssm-overlay kernels build --out DIR"

_TORCH_TO_TRITON = {
    "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64", "int64": "i64", "int32": "i32",
    "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1", "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5",
}
_LAUNCH_OPTIONS = ("num_warps", "num_stages")


class ArtifactRefused(OverlayError):
    """The prebuilt kernels cannot be used here; `what` says why. Callers fall back to the JIT path."""


def artifact_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The folder to use: the argument, else $RSO_KERNEL_DIR, else /opt/replayssm-overlay/kernels."""
    return Path(explicit or os.environ.get(ENV_DIR) or DEFAULT_DIR)


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """What the artifacts must match. `arch` is None where no CUDA device is visible."""

    triton: str | None
    python: str
    platform: str
    arch: int | None

    @classmethod
    def current(cls, arch: int | None = None) -> "NodeFacts":
        try:
            import triton

            version = triton.__version__
        except ImportError:
            version = None
        return cls(version, af.python_tag(), af.platform_key(), arch if arch is not None else _gpu_arch())


def _gpu_arch() -> int | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def check(folder: Path, facts: NodeFacts, verify_files: bool = True) -> tuple[dict | None, list[str]]:
    """(manifest or None, problems): every reason this node cannot use the folder; none means it can."""
    folder = Path(folder)
    if not folder.is_dir():
        return None, [f"kernel artifact folder {folder} does not exist"]
    try:
        manifest = af.read_manifest(folder)
    except ValueError as err:
        return None, [str(err)]
    builder, target = manifest.get("builder", {}), manifest.get("target", {})
    problems = []
    if facts.triton is None:
        problems.append("Triton is not installed in this Python")
    elif builder.get("triton") != facts.triton:
        problems.append(f"built with Triton {builder.get('triton')}, this node has Triton {facts.triton}")
    if builder.get("python") != facts.python:
        problems.append(f"built for Python {builder.get('python')}, this is {facts.python}")
    if builder.get("platform") != facts.platform:
        problems.append(f"built on platform {builder.get('platform')}, this is {facts.platform}")
    if target.get("backend") != "cuda":
        problems.append(f"built for backend {target.get('backend')!r}, not cuda")
    if facts.arch is None:
        problems.append("no CUDA device is visible, so the GPU architecture cannot be checked")
    elif target.get("arch") != facts.arch:
        problems.append(f"built for sm_{target.get('arch')}, this GPU is sm_{facts.arch}")
    if verify_files:
        for rel, digest in sorted(manifest.get("files", {}).items()):
            path = folder / rel
            if not path.is_file():
                problems.append(f"file {rel} is missing")
            elif sha256_file(path) != digest:
                problems.append(f"file {rel} does not match its sha256 in the manifest (changed or corrupted)")
    return manifest, problems


class ArtifactSet:
    """A checked artifact folder; hands out `PrebuiltKernel`s."""

    def __init__(self, folder: Path, manifest: dict):
        self.folder = Path(folder)
        self.manifest = manifest
        self._kernels = {entry["name"]: entry for entry in manifest.get("kernels", [])}

    @classmethod
    def open(cls, folder: str | os.PathLike | None = None, facts: NodeFacts | None = None) -> "ArtifactSet":
        folder = artifact_dir(folder)
        manifest, problems = check(folder, facts or NodeFacts.current())
        if problems:
            raise ArtifactRefused(
                f"prebuilt kernels in {folder} refused: " + "; ".join(problems),
                f"use the JIT fold (automatic), or {_REBUILD}, or point {ENV_DIR} at matching artifacts",
            )
        return cls(folder, manifest)

    def kernel(self, jit_fn) -> "PrebuiltKernel":
        """The prebuilt binaries of `jit_fn`; refuses if there are none or they are of another source."""
        name = jit_fn.__name__
        if not hasattr(jit_fn, "cache_key"):
            raise ArtifactRefused(f"kernel {name} runs under Triton's interpreter (TRITON_INTERPRET=1)",
                                  "unset TRITON_INTERPRET to use the prebuilt kernels")
        entry = self._kernels.get(name)
        if entry is None:
            raise ArtifactRefused(f"no prebuilt binaries for kernel {name} in {self.folder}", _REBUILD)
        if entry["source_key"] != jit_fn.cache_key:
            raise ArtifactRefused(
                f"the prebuilt {name} in {self.folder} was built from another version of its source "
                f"(Triton cache_key {entry['source_key'][:12]}..., installed {jit_fn.cache_key[:12]}...)",
                _REBUILD,
            )
        return PrebuiltKernel(self.folder, entry)


    def cuda_kernels(self):
        """The CUDA commit kernel of this folder (`cuda_fold.CudaKernels`, loaded on first use); refuses if
        the folder has none or it was built from another version of gdn_fold.cu."""
        from replayssm_overlay.kernels import cuda_fold, nvrtc

        entry = self.manifest.get("cuda") or {}
        if not entry.get("file"):
            why = f" ({entry['skipped']})" if entry.get("skipped") else ""
            raise ArtifactRefused(f"no CUDA commit kernel in {self.folder}{why}",
                                  f"{_REBUILD}, with NVRTC installed (pip install nvidia-cuda-nvrtc)")
        if entry.get("source_sha256") != sha256_file(nvrtc.SOURCE) or entry.get("columns") != cuda_fold.COLUMNS:
            raise ArtifactRefused(f"the CUDA commit kernel in {self.folder} was built from another version of "
                                  f"{nvrtc.SOURCE.name}", _REBUILD)
        path = self.folder / entry["file"]
        return cuda_fold.CudaKernels(path.read_bytes(), str(path))


class _Binary:
    """One specialization: the checks the arguments must pass, and its loaded kernel per device."""

    def __init__(self, folder: Path, arg_names: list[str], spec: dict):
        self.spec = spec
        self.folder = folder
        self.arg_names = arg_names
        self.options = spec["options"]
        self._compiled = {}
        divisible = {name for name, attrs in spec["attrs"].items() if ["tt.divisibility", 16] in attrs}
        self.checks = [(i, name, spec["signature"][name], spec["constexprs"].get(name), name in divisible)
                       for i, name in enumerate(arg_names)]

    def accepts(self, args: list) -> bool:
        for i, _name, ty, expected, divisible in self.checks:
            value = args[i]
            if ty == "constexpr":
                if type(value) is not type(expected) or value != expected:
                    return False
            elif ty.startswith("*"):
                dtype = getattr(value, "dtype", None)
                if dtype is None or _TORCH_TO_TRITON.get(str(dtype).rpartition(".")[2]) != ty[1:]:
                    return False
                if divisible and value.data_ptr() % 16:
                    return False
            elif not _scalar_fits(value, ty) or (divisible and value % 16):
                return False
        return True

    def compiled(self):
        """Triton's CompiledKernel for this binary on the current device, loaded once (no compilation)."""
        device = _current_device()
        kernel = self._compiled.get(device)
        if kernel is None:
            kernel = self._compiled[device] = _load(self.folder, self.arg_names, self.spec)
        return kernel


def _current_device() -> int:
    """The device Triton's CUDA driver would name, asked of torch: the first touch of
    `triton.runtime.driver.active` builds Triton's `cuda_utils` module, and that must happen inside
    `prebuilt_modules` (in `_load`), where it is served from the folder instead of compiled with gcc."""
    import torch

    return torch.cuda.current_device()


def _scalar_fits(value, ty: str) -> bool:
    if ty == "i1":
        return isinstance(value, bool)
    if ty in ("i32", "i64", "u32", "u64"):
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        bits = 32 if ty.endswith("32") else 64
        low, high = (0, 2**bits) if ty.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1))
        return low <= value < high
    if ty in ("fp32", "fp64"):
        return isinstance(value, (float, int)) and not isinstance(value, bool)
    return False


_LOAD_LOCK = threading.Lock()


def _load(folder: Path, arg_names: list[str], spec: dict):
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime import driver

    name = Path(spec["files"]["cubin"]).stem
    group = {f"{name}.{ext}": str(folder / rel) for ext, rel in spec["files"].items()}
    source = af.launcher_source(arg_names, spec["signature"], spec["constexprs"])
    kernel = CompiledKernel(source, group, spec["id"])
    with prebuilt_modules(folder):
        try:
            driver.active.utils  # first use in this process loads cuda_utils: from the folder too
            kernel._init_handles()
        except _BuildRefused as err:
            raise ArtifactRefused(f"{err} while loading {name} from {folder}", _REBUILD) from None
    return kernel


@contextlib.contextmanager
def prebuilt_modules(folder: Path):
    """While active, Triton finds its launcher modules in `folder/modules` and may build none."""
    import triton

    with _LOAD_LOCK, triton.knobs.cache.scope(), triton.knobs.build.scope():
        triton.knobs.cache.manager_class = _module_cache(Path(folder) / "modules")
        triton.knobs.build.impl = _refuse_build
        yield


class _BuildRefused(RuntimeError):
    pass


def _refuse_build(name, src, srcdir, library_dirs, include_dirs, libraries):
    raise _BuildRefused(f"Triton module {name} is not among the prebuilt ones (or does not import here)")


def _module_cache(root: Path):
    """A read-only Triton cache manager that serves the folder's prebuilt launcher modules."""
    from triton.runtime.cache import CacheManager

    class PrebuiltModules(CacheManager):
        def __init__(self, key, override=False, dump=False):
            self.dir = root / key

        def get_file(self, filename):
            path = self.dir / filename
            return str(path) if path.is_file() else None

        def get_group(self, filename):
            return None

        def put(self, data, filename, binary=True):
            raise _BuildRefused(f"Triton tried to cache {filename} while prebuilt kernels were loading")

        put_group = put

    return PrebuiltModules


class PrebuiltKernel:
    """Launched like a JIT function: `kernel[grid](*args, **kwargs)`; never compiles."""

    def __init__(self, folder: Path, entry: dict):
        self.name = entry["name"]
        self.arg_names = entry["arg_names"]
        self._binaries = [_Binary(folder, self.arg_names, spec) for spec in entry["specializations"]]
        self._index = {name: i for i, name in enumerate(self.arg_names)}
        # Arguments that are constexpr in every binary (the kernel's tl.constexpr parameters) pick the
        # candidates by dictionary lookup, so a launch checks one or two binaries, not all of them.
        self._keyed = [i for i, name in enumerate(self.arg_names)
                       if all(b.spec["signature"][name] == "constexpr" for b in self._binaries)]
        self._buckets = {}
        for binary in self._binaries:
            key = _constexpr_key([binary.spec["constexprs"][self.arg_names[i]] for i in self._keyed])
            self._buckets.setdefault(key, []).append(binary)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            bound = self._bind(args, kwargs)
            binary = self.select(bound, {k: kwargs[k] for k in _LAUNCH_OPTIONS if k in kwargs})
            kernel = binary.compiled()
            size = grid(dict(zip(self.arg_names, bound))) if callable(grid) else grid
            size = tuple(size) + (1,) * (3 - len(size))
            kernel[size](*bound)

        return launch

    def select(self, bound: list, options: dict) -> _Binary:
        """The binary these arguments satisfy; `ArtifactRefused` if none was prebuilt for them."""
        for binary in self._buckets.get(_constexpr_key([bound[i] for i in self._keyed]), ()):
            if all(binary.options.get(k) == v for k, v in options.items()) and binary.accepts(bound):
                return binary
        shown = {n: v for n, v in zip(self.arg_names, bound) if not hasattr(v, "data_ptr")}
        raise ArtifactRefused(f"no prebuilt {self.name} for these arguments: {shown} {options}", _REBUILD)

    def _bind(self, args: tuple, kwargs: dict) -> list:
        if len(args) > len(self.arg_names):
            raise TypeError(f"{self.name} takes {len(self.arg_names)} arguments, got {len(args)}")
        bound = list(args) + [_MISSING] * (len(self.arg_names) - len(args))
        for key, value in kwargs.items():
            if key in _LAUNCH_OPTIONS:
                continue
            if key not in self._index:
                raise TypeError(f"{self.name} has no argument {key!r}")
            bound[self._index[key]] = value
        missing = [n for n, v in zip(self.arg_names, bound) if v is _MISSING]
        if missing:
            raise TypeError(f"{self.name} is missing arguments {missing}")
        return bound


_MISSING = object()


def _constexpr_key(values: list) -> tuple:
    """Hashable, and tells True from 1 (Triton specializes on both, differently)."""
    return tuple((type(v).__name__, v if isinstance(v, (bool, int, float, str, type(None))) else id(v))
                 for v in values)


def open_or_explain(folder=None) -> tuple[ArtifactSet | None, str]:
    """(artifacts, "") when usable, else (None, the reason): for callers that fall back instead of failing."""
    try:
        return ArtifactSet.open(folder), ""
    except ArtifactRefused as err:
        return None, err.what
