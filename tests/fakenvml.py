"""A fake NVML at the library boundary: the function table ``pynvml`` resolves.

``install(monkeypatch, gpus)`` puts a fake ``nvmlLib`` into pynvml (so ``_LoadNvmlLibrary`` loads
nothing and ``_nvmlGetFunctionPointer`` resolves names on the fake, FUNCTION_NOT_FOUND for a name
the fake lacks). Every entry is a real ctypes ``CFUNCTYPE`` callback taking pointers as
``c_void_p``: a struct passed by value, not by reference, fails the call as it would crash C.
The fabric and platform callbacks write the bytes at the offsets of the C layouts in ``nvml.h``
with ``struct.pack_into`` (independently of the ctypes structs under test):

- nvmlGpuFabricInfo_t (legacy, 28): clusterUuid@0[16], status@16 u32, cliqueId@20 u32, state@24 u8
- nvmlGpuFabricInfo_v2_t (36) / _v3_t (40): version@0, clusterUuid@4[16], status@20, cliqueId@24,
  state@28 u8, healthMask@32 u32, healthSummary@36 u8 (v3)
- nvmlPlatformInfo_v2_t (44): version@0, ibGuid@4[16], chassisSerialNumber@20[16], slotNumber@36,
  trayIndex@37, hostId@38, peerType@39, moduleId@40
"""

from __future__ import annotations

import ctypes
import struct
import uuid as uuidlib
from dataclasses import dataclass, field

import pynvml

C_INT, VP = ctypes.c_int, ctypes.c_void_p
SUCCESS, NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH = 0, 3, 13, 25
V2, V3, PLATFORM_V2 = 0x02000024, 0x03000028, 0x0200002C
ZERO = "00000000-0000-0000-0000-000000000000"
_HANDLE_BASE = 0x1000


@dataclass
class FakeGpu:
    """One GPU as the fake driver sees it. ``fabric_versions``: the V-struct versions the driver
    accepts (empty: V returns ARGUMENT_VERSION_MISMATCH); ``has_v``/``has_legacy``: whether those
    symbols exist; ``platform``: None -> NOT_SUPPORTED. ``lost``: an nvmlReturn_t (15 GPU_IS_LOST,
    999 UNKNOWN) the GPU answers with from ``lost_from`` on: ``handle`` (nvmlDeviceGetHandleByIndex
    fails, as nvidia-smi's "Unable to determine the device handle"), ``uuid`` or ``fabric``."""

    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci: str = "00000008:01:00.0"
    state: int = 3
    status: int = 0
    cluster_uuid: str = ZERO
    clique: int = 0
    mask: int = 0
    summary: int = 0
    fabric_versions: tuple[int, ...] = (V3, V2)
    platform: dict | None = None
    lost: int = 0
    lost_from: str = "handle"
    calls: list = field(default_factory=list)


class _Lib:
    """Attributes = exported NVML symbols."""


def _at(addr: int, size: int):
    return (ctypes.c_char * size).from_address(addr)


def install(monkeypatch, gpus: list[FakeGpu], *, has_v: bool = True, has_legacy: bool = True,
            has_platform: bool = True) -> _Lib:
    lib = _Lib()
    keep: list = []  # the callbacks must outlive the test's calls

    def export(name, restype_args, impl):
        cb = ctypes.CFUNCTYPE(C_INT, *restype_args)(impl)
        keep.append(cb)
        setattr(lib, name, cb)

    def gpu_of(handle: int) -> FakeGpu:
        return gpus[handle - _HANDLE_BASE]

    def get_count(p):
        ctypes.c_uint.from_address(p).value = len(gpus)
        return SUCCESS

    def lost(gpu: FakeGpu, at: str) -> int:
        order = ("handle", "uuid", "fabric")
        return gpu.lost if gpu.lost and order.index(gpu.lost_from) <= order.index(at) else SUCCESS

    def get_handle(index, p):
        if index >= len(gpus):
            return 2  # INVALID_ARGUMENT
        if lost(gpus[index], "handle"):
            return gpus[index].lost
        ctypes.c_void_p.from_address(p).value = _HANDLE_BASE + index
        return SUCCESS

    def get_uuid(handle, buf, size):
        if lost(gpu_of(handle), "uuid"):
            return gpu_of(handle).lost
        data = gpu_of(handle).uuid.encode() + b"\0"
        ctypes.memmove(buf, data, min(len(data), size))
        return SUCCESS

    def get_pci(handle, p):
        info = ctypes.cast(p, ctypes.POINTER(pynvml.nvmlPciInfo_t)).contents
        info.busId = gpu_of(handle).pci.encode()
        return SUCCESS

    def fabric_v(handle, p):
        gpu = gpu_of(handle)
        version = ctypes.c_uint.from_address(p).value
        gpu.calls.append(("V", version))
        if lost(gpu, "fabric"):
            return gpu.lost
        if version not in gpu.fabric_versions:
            return ARGUMENT_VERSION_MISMATCH
        buf = _at(p, 40 if version == V3 else 36)
        struct.pack_into("<16sIIB", buf, 4, uuidlib.UUID(gpu.cluster_uuid).bytes, gpu.status, gpu.clique,
                         gpu.state)
        struct.pack_into("<I", buf, 32, gpu.mask)
        if version == V3:
            struct.pack_into("<B", buf, 36, gpu.summary)
        return SUCCESS

    def fabric_legacy(handle, p):
        gpu = gpu_of(handle)
        gpu.calls.append(("legacy", None))
        struct.pack_into("<16sIIB", _at(p, 28), 0, uuidlib.UUID(gpu.cluster_uuid).bytes, gpu.status,
                         gpu.clique, gpu.state)
        return SUCCESS

    def platform(handle, p):
        gpu = gpu_of(handle)
        if gpu.platform is None:
            return NOT_SUPPORTED
        if ctypes.c_uint.from_address(p).value != PLATFORM_V2:
            return ARGUMENT_VERSION_MISMATCH
        pl = gpu.platform
        struct.pack_into("<16s5B", _at(p, 44), 20, pl["chassisSerial"].encode(), pl["slotNumber"],
                         pl["trayIndex"], pl["hostId"], pl.get("peerType", 0), pl["moduleId"])
        return SUCCESS

    export("nvmlInitWithFlags", (ctypes.c_uint,), lambda flags: SUCCESS)
    export("nvmlShutdown", (), lambda: SUCCESS)
    export("nvmlDeviceGetCount_v2", (VP,), get_count)
    export("nvmlDeviceGetHandleByIndex_v2", (ctypes.c_uint, VP), get_handle)
    export("nvmlDeviceGetUUID", (VP, VP, ctypes.c_uint), get_uuid)
    export("nvmlDeviceGetPciInfo_v3", (VP, VP), get_pci)
    if has_v:
        export("nvmlDeviceGetGpuFabricInfoV", (VP, VP), fabric_v)
    if has_legacy:
        export("nvmlDeviceGetGpuFabricInfo", (VP, VP), fabric_legacy)
    if has_platform:
        export("nvmlDeviceGetPlatformInfo", (VP, VP), platform)
    lib._keep = keep
    monkeypatch.setattr(pynvml, "nvmlLib", lib)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    return lib


def install_no_library(monkeypatch) -> None:
    """pynvml finds no libnvidia-ml.so.1 (as on a host without the NVIDIA driver)."""
    def no_lib(*_a, **_k):
        raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "CDLL", no_lib)
