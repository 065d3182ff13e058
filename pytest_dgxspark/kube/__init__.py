"""Readers of Kubernetes objects (objects.py), pod states in plain words (podstate.py), the CUDA sample's own
namespace (cudarun.py) and the GPU Operator's operands against their chart's release (operands.py).

It may import every layer below it: `data/`, `catalog/`, `site/`, `targets/`, `probes/` and the check vocabulary.
"""
