"""The node agent: read every GPU through NVML (``nvidia-ml-py``'s ``pynvml``) into one NodeReport.

Source of truth for layouts and values: the NVML header ``nvml.h`` (nvmlGpuFabricInfo_t,
nvmlGpuFabricInfo_v2_t / _v3_t, nvmlPlatformInfo_v1_t / _v2_t, NVML_GPU_FABRIC_STATE_*,
NVML_GPU_FABRIC_HEALTH_SUMMARY_*, nvmlReturn_t). The fabric and platform structs are defined
here with ctypes, not taken from pynvml, and pynvml's wrappers are not used for them. Measured
on every nvidia-ml-py release from 12.535.77 to 13.615.71 (struct sizes against nvml.h):
the legacy nvmlGpuFabricInfo_t is 92 bytes, not 28 (an 80-byte clusterUuid), in every release
before 13.615.71; the V struct is 100 bytes, not 36, in 12.550.52-12.560.30; v3 (healthSummary)
first appears in 13.580.65 and nvmlPlatformInfo_v2_t in 12.570.172. Only 13.615.71 matches the
header throughout, so relying on pynvml's structs would set the floor at the newest release;
with our own layouts the declared floor (12.550, the first with nvmlDeviceGetGpuFabricInfoV)
works, which this module's tests show on it. The C functions are looked up with
``pynvml._nvmlGetFunctionPointer`` (private, present in every release measured; a test pins it)
and our structs are passed by reference.

Fabric info is read at the highest level the driver answers:
``nvmlDeviceGetGpuFabricInfoV`` v3 (40 bytes, adds healthSummary) -> v2 (36 bytes,
healthMask) -> legacy ``nvmlDeviceGetGpuFabricInfo`` (28 bytes). NOT_SUPPORTED,
FUNCTION_NOT_FOUND and ARGUMENT_VERSION_MISMATCH mean "not at this level": try the next one;
if no level answers, the GPU's ``fabric`` is left out. As nvidia-smi does, status, cliqueId,
clusterUuid, healthMask and healthSummary are null (N/A) unless the state is Completed
(NVML fills them only once the GPU's fabric registration has completed).

A GPU that answers a query with GPU_IS_LOST, GPU_REQUIRES_RESET or UNKNOWN (the "Unable to
determine the device handle for GPU ...: GPU is lost" of nvidia-smi) is listed by its index with
``error`` in nvmlErrorString's words and nothing else: it is missing, and the planner counts it
so (``gpu-missing``); the other GPUs are still read.

Errors: no NVML library, a failing nvmlInit, zero GPUs, or another unexpected NVML error on a GPU
raise ``RackctlError`` (the CLI prints it and exits 1).
"""

from __future__ import annotations

import ctypes
import socket
import uuid as uuidlib
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

from reconciler.errors import RackctlError
from reconciler.inventory.imex import read_imex_state
from reconciler.nodereport import Gpu, GpuFabric, GpuPlatform, Interface, NodeReport

__all__ = ["collect_node_report", "FabricInfoV1", "FabricInfoV2", "FabricInfoV3", "PlatformInfoV1",
           "PlatformInfoV2", "FABRIC_V2", "FABRIC_V3", "PLATFORM_V1", "PLATFORM_V2", "status_words"]

# nvmlReturn_t values used here (nvml.h)
SUCCESS, NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH = 0, 3, 13, 25
_NOT_AT_THIS_LEVEL = frozenset({NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH})
GPU_IS_LOST, GPU_REQUIRES_RESET, UNKNOWN = 15, 16, 999
#: What a GPU that no longer answers returns, to any query: it is missing, not an agent failure.
_NOT_ANSWERING = frozenset({GPU_IS_LOST, GPU_REQUIRES_RESET, UNKNOWN})

# NVML_STRUCT_VERSION(name, ver) = sizeof(struct) | ver << 24
FABRIC_V2, FABRIC_V3 = 0x02000024, 0x03000028
PLATFORM_V1, PLATFORM_V2 = 0x0100002C, 0x0200002C

_UUID_LEN = 16  # NVML_GPU_FABRIC_UUID_LEN


class FabricInfoV1(ctypes.Structure):
    """nvmlGpuFabricInfo_t (legacy, 28 bytes): ``state`` is nvmlGpuFabricState_t = unsigned char."""

    _fields_ = [("clusterUuid", ctypes.c_ubyte * _UUID_LEN), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte)]


class FabricInfoV2(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t (36 bytes, version 0x02000024): adds ``version`` and ``healthMask``."""

    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * _UUID_LEN),
                ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte),
                ("healthMask", ctypes.c_uint)]


class FabricInfoV3(ctypes.Structure):
    """nvmlGpuFabricInfo_v3_t (40 bytes, version 0x03000028): adds ``healthSummary`` (unsigned char)."""

    _fields_ = FabricInfoV2._fields_ + [("healthSummary", ctypes.c_ubyte)]


class PlatformInfoV1(ctypes.Structure):
    """nvmlPlatformInfo_v1_t (44 bytes): rack GUID instead of a chassis serial number."""

    _fields_ = [("version", ctypes.c_uint), ("ibGuid", ctypes.c_ubyte * 16), ("rackGuid", ctypes.c_ubyte * 16),
                ("chassisPhysicalSlotNumber", ctypes.c_ubyte), ("computeSlotIndex", ctypes.c_ubyte),
                ("nodeIndex", ctypes.c_ubyte), ("peerType", ctypes.c_ubyte), ("moduleId", ctypes.c_ubyte)]


class PlatformInfoV2(ctypes.Structure):
    """nvmlPlatformInfo_v2_t (44 bytes): chassisSerialNumber is 16 bytes of text, NUL padded."""

    _fields_ = [("version", ctypes.c_uint), ("ibGuid", ctypes.c_ubyte * 16),
                ("chassisSerialNumber", ctypes.c_ubyte * 16), ("slotNumber", ctypes.c_ubyte),
                ("trayIndex", ctypes.c_ubyte), ("hostId", ctypes.c_ubyte), ("peerType", ctypes.c_ubyte),
                ("moduleId", ctypes.c_ubyte)]


_STATES = ("Not Supported", "Not Started", "In Progress", "Completed")  # NVML_GPU_FABRIC_STATE_*
_COMPLETED = 3
_SUMMARIES = ("Not Supported", "Healthy", "Unhealthy", "Limited Capacity")  # ..._HEALTH_SUMMARY_*

# nvmlReturn_t -> the words nvmlErrorString gives and nvidia-smi prints as the fabric Status.
_STATUS_WORDS = {
    0: "Success", 1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported",
    4: "Insufficient Permissions", 5: "Already Initialized", 6: "Not Found", 7: "Insufficient Size",
    8: "Insufficient External Power", 9: "Driver Not Loaded", 10: "Timeout", 11: "Interrupt Request Issue",
    12: "NVML Shared Library Not Found", 13: "Function Not Found", 14: "Corrupted infoROM",
    15: "GPU is lost", 16: "GPU requires restart", 17: "The operating system has blocked the request.",
    18: "RM has detected an NVML/RM version mismatch.", 19: "In use by another client",
    20: "Insufficient Memory", 21: "No data", 22: "The requested vgpu operation is not available on target "
    "device, because ECC is enabled", 23: "Insufficient Resources", 24: "Frequency Not Supported",
    25: "Argument Version Mismatch", 26: "Deprecated", 27: "Not Ready", 28: "GPU Not Found",
    29: "Invalid State", 30: "Reset Type Not Supported", 999: "Unknown Error",
}


def status_words(code: int) -> str:
    """nvidia-smi's words for an nvmlReturn_t (``23`` -> ``"Insufficient Resources"``)."""
    return _STATUS_WORDS.get(code, f"Unknown Error ({code})")


def collect_node_report(*, hostname: str | None = None, interfaces: list[Interface] | None = None,
                        now: datetime | None = None, imex_root: Path = Path("/")) -> NodeReport:
    """Read every GPU through NVML and return one NodeReport dict (schemaVersion 1).

    Shape: ``{"schemaVersion": 1, "hostname", "source": "nvml", "collectedAt": RFC 3339 UTC,
    "interfaces": [...], "gpus": [{"index", "uuid", "pciBusId", "fabric"?, "platform"?}],
    "imex": {"hostService", "nodesFile", "nodes"?, "channelsMajor"}}``.
    ``hostname`` defaults to ``socket.gethostname()``, ``interfaces`` to every interface of the
    host with an address and its kind (``reconciler.inventory.netlink.host_interfaces``: no
    policy here, the planner chooses what IMEX uses), ``now`` to the current time; ``imex`` is
    read from the files under ``imex_root`` (see ``reconciler.inventory.imex``).
    """
    pynvml = _init()
    try:
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            raise RackctlError(f"nvmlDeviceGetCount failed: {status_words(exc.value)} (nvmlReturn_t {exc.value})",
                               hint="is the NVIDIA driver loaded? check `nvidia-smi`") from None
        if count == 0:
            raise RackctlError("NVML reports no GPU on this host; nothing to discover",
                               hint="check `nvidia-smi -L`; run discover on GPU nodes only")
        gpus = [_gpu(pynvml, index) for index in range(count)]
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    if interfaces is None:
        from reconciler.inventory.netlink import host_interfaces
        interfaces = host_interfaces()
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    return {"schemaVersion": 1, "hostname": hostname or socket.gethostname(), "source": "nvml",
            "collectedAt": stamp.isoformat().replace("+00:00", "Z"), "interfaces": list(interfaces),
            "gpus": gpus, "imex": read_imex_state(imex_root)}


def _init() -> ModuleType:
    try:
        import pynvml
    except ImportError:  # pragma: no cover - a declared dependency
        raise RackctlError("the nvidia-ml-py package (module pynvml) is not installed",
                           hint="pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if exc.value == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            raise RackctlError("NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this host",
                               hint="run discover on a GPU node with the NVIDIA driver installed") from None
        raise RackctlError(f"NVML could not start: {status_words(exc.value)} (nvmlReturn_t {exc.value})",
                           hint="is the NVIDIA driver loaded? check `nvidia-smi`") from None
    module: ModuleType = pynvml
    return module


def _text(value: bytes | str) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value


class _Lost(Exception):
    """A GPU answered with one of ``_NOT_ANSWERING`` (``code``)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _gpu(pynvml: ModuleType, index: int) -> Gpu:
    try:
        return _read_gpu(pynvml, index)
    except _Lost as lost:
        return {"index": index, "error": status_words(lost.code)}


def _read_gpu(pynvml: ModuleType, index: int) -> Gpu:
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        pci = _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
    except pynvml.NVMLError as exc:
        if exc.value in _NOT_ANSWERING:
            raise _Lost(exc.value) from None
        raise RackctlError(f"GPU {index}: reading its handle, UUID or PCI bus id failed: "
                           f"{status_words(exc.value)} (nvmlReturn_t {exc.value})") from None
    gpu: Gpu = {"index": index, "uuid": uuid or None, "pciBusId": pci or None}
    fabric = read_fabric(pynvml, handle, index)
    if fabric is not None:
        gpu["fabric"] = fabric
    platform = read_platform(pynvml, handle, index)
    if platform is not None:
        gpu["platform"] = platform
    return gpu


def _call(pynvml: ModuleType, name: str, handle: object, struct: ctypes.Structure) -> int:
    """Call NVML ``name(handle, &struct)``; the nvmlReturn_t (FUNCTION_NOT_FOUND if absent)."""
    try:
        fn = pynvml._nvmlGetFunctionPointer(name)
    except pynvml.NVMLError as exc:
        rc: int = exc.value
        return rc
    return int(fn(handle, ctypes.byref(struct)))


def read_fabric(pynvml: ModuleType, handle: object, index: int) -> GpuFabric | None:
    """NodeReport ``fabric`` of one GPU at the highest level the driver answers; None if none does."""
    levels = ((3, "nvmlDeviceGetGpuFabricInfoV", FabricInfoV3, FABRIC_V3),
              (2, "nvmlDeviceGetGpuFabricInfoV", FabricInfoV2, FABRIC_V2),
              (1, "nvmlDeviceGetGpuFabricInfo", FabricInfoV1, None))
    for level, name, cls, version in levels:
        info = cls()
        if version is not None:
            info.version = version
        rc = _call(pynvml, name, handle, info)
        if rc == SUCCESS:
            return decode_fabric(info, level)
        _fail_unless(rc, _NOT_AT_THIS_LEVEL, index, name)
    return None


def _fail_unless(rc: int, expected: frozenset[int], index: int, name: str) -> None:
    """Raise ``_Lost`` for a GPU that stopped answering, ``RackctlError`` for any other ``rc``
    outside ``expected``."""
    if rc in _NOT_ANSWERING:
        raise _Lost(rc)
    if rc not in expected:
        raise RackctlError(f"GPU {index}: {name} failed: {status_words(rc)} (nvmlReturn_t {rc})")


def decode_fabric(info: ctypes.Structure, level: int) -> GpuFabric:
    """NodeReport ``fabric`` from a filled fabric struct of ``level`` 1 (legacy), 2 or 3."""
    state = info.state
    out: GpuFabric = {"state": _STATES[state] if state < len(_STATES) else None}
    done = state == _COMPLETED
    out["status"] = status_words(info.status) if done else None
    out["cliqueId"] = int(info.cliqueId) if done else None
    out["clusterUuid"] = str(uuidlib.UUID(bytes=bytes(info.clusterUuid))) if done else None
    if level >= 2:
        out["healthMask"] = int(info.healthMask) if done else None
    if level >= 3:
        summary = info.healthSummary
        out["healthSummary"] = (_SUMMARIES[summary] if summary < len(_SUMMARIES) else None) if done else None
    return out


def read_platform(pynvml: ModuleType, handle: object, index: int) -> GpuPlatform | None:
    """NodeReport ``platform`` via nvmlDeviceGetPlatformInfo (v2, then v1); None where unsupported."""
    for cls, version in ((PlatformInfoV2, PLATFORM_V2), (PlatformInfoV1, PLATFORM_V1)):
        info = cls(version=version)
        rc = _call(pynvml, "nvmlDeviceGetPlatformInfo", handle, info)
        if rc == SUCCESS:
            if cls is PlatformInfoV2:
                serial = bytes(info.chassisSerialNumber).split(b"\0", 1)[0].decode("ascii", "replace")
                return {"chassisSerial": serial or None, "slotNumber": info.slotNumber,
                        "trayIndex": info.trayIndex, "hostId": info.hostId, "moduleId": info.moduleId}
            return {"slotNumber": info.chassisPhysicalSlotNumber, "trayIndex": info.computeSlotIndex,
                    "hostId": info.nodeIndex, "moduleId": info.moduleId}
        _fail_unless(rc, _NOT_AT_THIS_LEVEL, index, "nvmlDeviceGetPlatformInfo")
    return None
