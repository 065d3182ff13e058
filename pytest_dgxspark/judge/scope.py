"""The scope of a run: which rules it selected (-m, -k), which it left out, and prerequisites it did not verify."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_dgxspark.catalog.rules import Catalog

GPU_CHAIN = "GPU chain"


@dataclass(frozen=True)
class Scope:
    """`name` is "full" for an unselected run; `selected` the rules with tests that ran; `not_selected` the rules
    whose every test was deselected; `unverified` the prerequisites (depends_on, transitively) of selected rules
    that this run did not judge."""

    name: str
    selected: tuple[str, ...]
    not_selected: tuple[str, ...]
    unverified: tuple[str, ...]

    @property
    def full(self) -> bool:
        return not self.not_selected

    def as_dict(self) -> dict:
        return {"name": self.name, "full": self.full, "selected": list(self.selected),
                "not_selected": list(self.not_selected), "unverified_prerequisites": list(self.unverified)}


def scope_of(catalog: Catalog, selected: Iterable[str], deselected: Iterable[str], markexpr: str = "",
             keyword: str = "") -> Scope:
    """The scope from the rule ids of selected and deselected items and the selection options."""
    chosen = {r for r in selected if r in catalog.rules}
    left_out = {r for r in deselected if r in catalog.rules} - chosen
    order = [r.id for r in catalog.ordered()]
    unverified = sorted({a for rid in chosen for a in catalog.ancestors(rid)} - chosen, key=order.index)
    if not left_out:
        name = "full"
    elif chosen == {r.id for r in catalog.rules.values() if r.gpu} and markexpr.strip() == "gpu" and not keyword:
        name = GPU_CHAIN
    else:
        name = " ".join(part for part in (f"-m {markexpr!r}" if markexpr else "", f"-k {keyword!r}" if keyword else "")
                        if part) or "selected tests"
    return Scope(name, tuple(r for r in order if r in chosen), tuple(r for r in order if r in left_out),
                 tuple(unverified))
