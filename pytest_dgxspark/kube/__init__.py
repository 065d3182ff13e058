"""Readers of Kubernetes objects (objects.py), pod states in plain words (podstate.py) and the CUDA sample's own
namespace (cudarun.py).

It may import every layer below it: `data/`, `catalog/`, `site/`, `targets/`, `probes/` and the check vocabulary.
"""
