"""The CUDA driver through ctypes, and a kernel launch from one parameter buffer made once.

Why: the commit runs eagerly once per verify step, so every microsecond between the call and the queued
launch is on each request's path; a launch through ctypes with its arguments made once costs the host
about 7-9 us a commit on the H200's host, Triton's runner 13-16 (notes/perf.md, session 13). Both of the
overlay's own launches go through here, with the kernel's parameters as one buffer
(`CU_LAUNCH_PARAM_BUFFER_POINTER`; as fast as an array of parameter pointers, measured): the CUDA commit
kernel's (`cuda_fold`: the buffer is its argument struct) and the Triton binaries' (`launch`: the buffer
laid out at the offsets the driver reports). A `CubinLaunch` holds everything `cuLaunchKernel` takes but
the stream as ctypes values, so a launch converts nothing; its caller writes the changed parameters into
the buffer, then calls it. Capture into a CUDA graph records it like any launch on the current stream (the
parameters are copied when the launch is queued).
"""

from __future__ import annotations

import ctypes
import threading

_driver = None
_driver_lock = threading.Lock()
CUDA_ERROR_INVALID_VALUE = 1


class CudaError(RuntimeError):
    """A CUDA driver call failed (the commit falls back to SGLang's fold for that call; nothing was launched)."""


def driver() -> ctypes.CDLL:
    """libcuda, loaded once per process."""
    global _driver
    with _driver_lock:
        if _driver is None:
            _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def check(rc: int, what: str) -> None:
    """CudaError naming the driver's error unless `rc` is CUDA_SUCCESS."""
    if rc != 0:
        name = ctypes.c_char_p()
        driver().cuGetErrorName(rc, ctypes.byref(name))
        raise CudaError(f"{what}: {name.value.decode() if name.value else rc}")


def param_layout(function) -> list[tuple[int, int]] | None:
    """(offset, size) in bytes of each parameter of a loaded kernel, from the driver (`cuFuncGetParamInfo`,
    CUDA 12.4 and later); None where the driver cannot say."""
    lib = driver()
    if not hasattr(lib, "cuFuncGetParamInfo"):
        return None
    layout, offset, size = [], ctypes.c_size_t(), ctypes.c_size_t()
    function = _handle(function)
    while True:
        rc = lib.cuFuncGetParamInfo(function, ctypes.c_size_t(len(layout)), ctypes.byref(offset), ctypes.byref(size))
        if rc == CUDA_ERROR_INVALID_VALUE:  # past the last parameter
            return layout
        if rc != 0:
            return None
        layout.append((offset.value, size.value))


def _handle(function) -> ctypes.c_void_p:
    """A CUfunction as an int (as Triton holds it) or a ctypes.c_void_p (as `cuModuleGetFunction` fills it)."""
    return function if isinstance(function, ctypes.c_void_p) else ctypes.c_void_p(function)


_CU_LAUNCH_PARAM_BUFFER_POINTER, _CU_LAUNCH_PARAM_BUFFER_SIZE, _CU_LAUNCH_PARAM_END = 1, 2, 0


class CubinLaunch:
    """`cuLaunchKernel(function, grid, threads x 1 x 1, shared, <current stream>, extra=<buffer>)`: the kernel's
    parameters are the bytes of `buffer` (a ctypes object laid out as the kernel takes them), read when the
    launch is queued."""

    def __init__(self, function, grid: tuple, threads: int, shared: int, buffer, device_index: int):
        import torch

        grid = tuple(grid) + (1,) * (3 - len(grid))
        self.buffer = buffer
        self._size = ctypes.c_size_t(ctypes.sizeof(buffer))
        self._extra = (ctypes.c_void_p * 5)(_CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buffer),
                                            _CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self._size),
                                            _CU_LAUNCH_PARAM_END)
        self._stream = ctypes.c_void_p()
        self._head = (_handle(function), *(ctypes.c_uint(n) for n in grid), ctypes.c_uint(threads),
                      ctypes.c_uint(1), ctypes.c_uint(1), ctypes.c_uint(shared), self._stream, None, self._extra)
        self._launch_kernel = driver()["cuLaunchKernel"]
        self._stream_of, self._device_index = torch._C._cuda_getCurrentRawStream, device_index

    def __call__(self) -> None:
        """Queue the kernel on the device's current stream; CudaError if the driver refuses."""
        self._stream.value = self._stream_of(self._device_index)
        rc = self._launch_kernel(*self._head)
        if rc != 0:
            check(rc, "cuLaunchKernel")
