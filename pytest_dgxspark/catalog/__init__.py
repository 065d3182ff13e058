"""The rule catalog as data: one YAML file per ADR, loaded and checked once (rules.py), with layers and connectivity
owners; and the GPU Operator's release table the rules judge by (gpu-operator-releases.yaml, releases.py).

It may import `data/` only; everything above reads rules from here, never hard-codes a rule id or a layer.
"""
