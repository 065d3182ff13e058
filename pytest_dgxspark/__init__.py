"""pytest-dgxspark: conformance of an RKE2 + GPU Operator cluster on an NVIDIA DGX Spark.

`not_applicable` and `NOT_APPLICABLE_PREFIX` (pytest_dgxspark.checking) are imported when first asked for: a testbed
process (the stand-in API server, kwokrun.py, the fault proxy) imports only its own modules, not pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_dgxspark.checking import NOT_APPLICABLE_PREFIX, not_applicable

__all__ = ["NOT_APPLICABLE_PREFIX", "not_applicable"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from pytest_dgxspark import checking

    value = getattr(checking, name)
    globals()[name] = value
    return value
