"""What a pod sees of the node's GPUs: the probe its container runs (device nodes, nvidia-smi -L) and its log parsed."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_dgxspark.probes.nvidia_driver import SmiGpu, parse_nvidia_smi_list

# Run by /bin/sh in the CUDA sample's image (Ubuntu: dash, GNU ls): the device nodes the container was given, then
# the GPUs NVML shows it. Each step's exit status is echoed, so a log says what ran even where a step printed nothing.
# Without a GPU the toolkit injects neither device nodes nor nvidia-smi: `ls: cannot access '/dev/nvidia*': No such
# file or directory` (exit 2), `sh: 1: nvidia-smi: not found` (exit 127).
PROBE = 'ls /dev/nvidia*; echo "dgxspark-probe ls exit $?"; nvidia-smi -L; echo "dgxspark-probe nvidia-smi exit $?"'
PROBE_COMMAND = ["/bin/sh", "-c", PROBE]
_EXIT = re.compile(r"^dgxspark-probe (ls|nvidia-smi) exit (\d+)\s*$")
_DEVICE = re.compile(r"^/dev/nvidia(\d+|ctl|-uvm|-uvm-tools|-modeset|-caps\S*)\s*$")
_GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")


@dataclass(frozen=True)
class PodView:
    """What the probe printed: the /dev/nvidia* nodes, nvidia-smi's exit status and GPUs, and whether it ran whole."""

    devices: tuple[str, ...]
    ls_exit: int | None
    smi_exit: int | None
    gpus: tuple[SmiGpu, ...]
    smi_said: str  # nvidia-smi's own line(s) when it listed no GPU (its error), else ""

    @property
    def ran(self) -> bool:
        """Both steps ran to their echoed exit status (a log cut short, or another program's, is no view)."""
        return self.ls_exit is not None and self.smi_exit is not None

    @property
    def gpu_minors(self) -> tuple[int, ...]:
        """The minor numbers of the GPU device nodes (/dev/nvidia<N>) the container holds."""
        return tuple(int(m.group(1)) for d in self.devices if (m := _GPU_NODE.match(d)))

    def in_words(self) -> str:
        devices = ", ".join(self.devices) or "no /dev/nvidia* node"
        if self.gpus:
            smi = "nvidia-smi -L lists " + ", ".join(f"{g.name} ({g.uuid})" for g in self.gpus)
        else:
            smi = f"nvidia-smi exit {self.smi_exit}" + (f" ({self.smi_said})" if self.smi_said else "")
        return f"{devices}; {smi}"


def parse_probe(log: str) -> PodView:
    """The probe's log (stdout and stderr as the kubelet serves them) as a PodView; tolerant of other lines."""
    devices: list[str] = []
    exits: dict[str, int] = {}
    smi_lines: list[str] = []
    for line in (log or "").splitlines():
        text = line.strip()
        done = _EXIT.match(text)
        if done is not None:
            exits[done.group(1)] = int(done.group(2))
        elif "ls" not in exits and _DEVICE.match(text):
            devices.append(text)
        elif "ls" in exits and "nvidia-smi" not in exits and text:
            smi_lines.append(line)
    gpus = tuple(parse_nvidia_smi_list("\n".join(smi_lines)))
    said = "" if gpus else " ".join(s.strip() for s in smi_lines)[:300]
    return PodView(tuple(devices), exits.get("ls"), exits.get("nvidia-smi"), gpus, said)
