"""The CUDA driver through ctypes, and a kernel launch from one parameter buffer made once.

Why: the commit runs eagerly once per verify step, so every microsecond between the call and the queued
launch is on each request's path; a launch through ctypes with its arguments made once costs the host
about 7-9 us a commit on the H200's host, Triton's runner 13-16 (notes/perf.md, "What bounds it"). The CUDA commit
kernel's launch (`cuda_fold`) goes through here, with the kernel's parameters as one buffer, its argument
struct (`CU_LAUNCH_PARAM_BUFFER_POINTER`; as fast as an array of parameter pointers, measured). A
`CubinLaunch` holds everything `cuLaunchKernel` takes but the stream as ctypes values, so a launch converts
nothing; its caller writes the changed parameters into the buffer, then calls it. Capture into a CUDA graph
records it like any launch on the current stream (the parameters are copied when the launch is queued).
"""

from __future__ import annotations

import ctypes
import threading

from replayssm_overlay.errors import NotCovered

_driver = None
_driver_lock = threading.Lock()


def driver() -> ctypes.CDLL:
    """libcuda, loaded once per process."""
    global _driver
    with _driver_lock:
        if _driver is None:
            _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def check(rc: int, what: str) -> None:
    """`NotCovered` naming the driver's error unless `rc` is CUDA_SUCCESS: a failed driver call launched
    nothing, so the commit falls back to SGLang's fold for that call."""
    if rc != 0:
        name = ctypes.c_char_p()
        driver().cuGetErrorName(rc, ctypes.byref(name))
        raise NotCovered(f"{what}: {name.value.decode() if name.value else rc}")


_CU_LAUNCH_PARAM_BUFFER_POINTER, _CU_LAUNCH_PARAM_BUFFER_SIZE, _CU_LAUNCH_PARAM_END = 1, 2, 0


class CubinLaunch:
    """`cuLaunchKernel(function, grid, threads x 1 x 1, shared, <current stream>, extra=<buffer>)`: the kernel's
    parameters are the bytes of `buffer` (a ctypes object laid out as the kernel takes them), read when the
    launch is queued. `function` is the CUfunction as `cuModuleGetFunction` filled it (a ctypes.c_void_p)."""

    def __init__(self, function, grid: tuple, threads: int, shared: int, buffer, device_index: int):
        import torch

        grid = tuple(grid) + (1,) * (3 - len(grid))
        self.buffer = buffer
        self._size = ctypes.c_size_t(ctypes.sizeof(buffer))
        self._extra = (ctypes.c_void_p * 5)(
            _CU_LAUNCH_PARAM_BUFFER_POINTER,
            ctypes.addressof(buffer),
            _CU_LAUNCH_PARAM_BUFFER_SIZE,
            ctypes.addressof(self._size),
            _CU_LAUNCH_PARAM_END,
        )
        self._stream = ctypes.c_void_p()
        self._head = (
            function,
            *(ctypes.c_uint(n) for n in grid),
            ctypes.c_uint(threads),
            ctypes.c_uint(1),
            ctypes.c_uint(1),
            ctypes.c_uint(shared),
            self._stream,
            None,
            self._extra,
        )
        self._launch_kernel = driver()["cuLaunchKernel"]
        self._stream_of, self._device_index = torch._C._cuda_getCurrentRawStream, device_index

    def __call__(self) -> None:
        """Queue the kernel on the device's current stream; NotCovered if the driver refuses."""
        self._stream.value = self._stream_of(self._device_index)
        rc = self._launch_kernel(*self._head)
        if rc != 0:
            check(rc, "cuLaunchKernel")
