"""Probe of NVML: where libnvidia-ml.so.1 resolves, and what nvmlInit_v2 and the device queries answer."""

from __future__ import annotations

import shlex
from functools import cached_property
from typing import Any

from pytest_dgxspark.data.yamlload import loads_json
from pytest_dgxspark.probes import Command, Reading, Settings

NAME = "nvml"

LDCONFIG = "/sbin/ldconfig -p 2>/dev/null || ldconfig -p"
NVML_TIMEOUT_S = 30
NVML_PROBE = r"""
import ctypes, json
out = {}
try:
    lib = ctypes.CDLL("libnvidia-ml.so.1")
except OSError as error:
    print(json.dumps({"load_error": str(error)}))
    raise SystemExit(0)
lib.nvmlErrorString.restype = ctypes.c_char_p
def err(rc):
    return lib.nvmlErrorString(rc).decode(errors="replace")
rc = lib.nvmlInit_v2()
out["init"] = rc
out["init_error"] = err(rc) if rc else None
if rc == 0:
    buf = ctypes.create_string_buffer(96)
    out["driver_rc"] = lib.nvmlSystemGetDriverVersion(buf, 96)
    out["driver"] = buf.value.decode(errors="replace")
    count = ctypes.c_uint(0)
    out["count_rc"] = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    out["count"] = count.value
    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
    devices = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        hrc = lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
        name = ctypes.create_string_buffer(96)
        nrc = lib.nvmlDeviceGetName(handle, name, 96) if hrc == 0 else hrc
        memory = Memory()
        mrc = lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) if hrc == 0 else hrc
        devices.append({"index": index, "handle_rc": hrc, "name_rc": nrc, "name": name.value.decode(errors="replace"),
                        "memory_rc": mrc, "memory_error": err(mrc) if mrc else None,
                        "memory_total": memory.total if mrc == 0 else None})
    out["devices"] = devices
    lib.nvmlShutdown()
print(json.dumps(out))
"""
NVML_COMMAND = f"python3 -c {shlex.quote(NVML_PROBE)}"


def commands(spec: Any, settings: Settings) -> tuple[Command, ...]:
    """GPU hosts only."""
    return (Command(LDCONFIG), Command(NVML_COMMAND, NVML_TIMEOUT_S)) if spec.gpu else ()


def ldconfig_has(ldconfig_p: str, soname: str = "libnvidia-ml.so.1") -> list[str]:
    """Paths `ldconfig -p` resolves for a soname (empty when it resolves none)."""
    paths = []
    for line in (ldconfig_p or "").splitlines():
        line = line.strip()
        if line.startswith(soname + " ") and "=>" in line:
            paths.append(line.split("=>", 1)[1].strip())
    return paths


def nvml_probe_result(text: str) -> dict[str, Any]:
    """The JSON line the NVML probe prints (last line that parses as a JSON object)."""
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return loads_json(line, "the NVML probe's answer")
            except ValueError:  # not JSON, or past the loader's budgets
                continue
    raise ValueError(f"NVML probe printed no JSON result: {text[-300:]!r}")


class Nvml(Reading):
    """NVML on one host: the linker cache's answer and the NVML probe's, with what they say."""

    @property
    def ldconfig(self) -> Any:
        return self.answer(LDCONFIG)

    @cached_property
    def library_paths(self) -> tuple[str, ...]:
        """Where `ldconfig -p` resolves libnvidia-ml.so.1 (none: it does not resolve)."""
        return tuple(ldconfig_has(self.ldconfig.stdout))

    @property
    def probe(self) -> Any:
        return self.answer(NVML_COMMAND, NVML_TIMEOUT_S)

    @cached_property
    def result(self) -> dict[str, Any]:
        """The NVML probe's JSON result; ValueError when it printed none."""
        return nvml_probe_result(self.probe.stdout)


def read(target: Any, settings: Settings) -> Nvml:
    """The NVML probe of one host."""
    return Nvml(target, settings)
