"""pytest-dgxspark: conformance of an RKE2 + GPU Operator cluster on an NVIDIA DGX Spark."""

from __future__ import annotations

from pytest_dgxspark.checking import NOT_APPLICABLE_PREFIX, not_applicable

__all__ = ["NOT_APPLICABLE_PREFIX", "not_applicable"]
