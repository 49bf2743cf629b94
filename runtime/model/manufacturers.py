"""Rule kind ``ManufacturerTable`` (rules/manufacturers.yaml): the known accelerator manufacturers
(docs/tasks/add-manufacturer-or-preset.md "Add a manufacturer"), each with the views its devices offer
(docs/concepts/dra.md, docs/tasks/add-manufacturer-or-preset.md); the conditions are evaluated by
:mod:`runtime.engine.devices.views`.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from runtime.model.base import Expr, Strict

# the four views (docs/concepts/four-views.md "The four views"), in order
VIEWS = ("exclusive", "shared", "sliced", "partitioned")
ViewName = Literal["exclusive", "shared", "sliced", "partitioned"]


class Manufacturer(Strict):
    id: str = Field(pattern=r"^[a-z0-9]+$")
    base: str = Field(min_length=1, description="base extended-resource name, e.g. nvidia.com/gpu")
    pciVendor: str = ""
    partitionKind: str = ""
    runtimeName: str = ""
    logicalSlices: int = Field(ge=0)
    coresOvercommit: bool = False
    views: Optional[dict[ViewName, Expr]] = Field(
        None,
        description="view -> the CEL condition (over `accelerator`) under which one of its devices offers "
                          "it; a view left out is never offered. Absent: every view, as the device allows")

    @field_validator("views")
    @classmethod
    def _exclusive_always(cls, value: Optional[dict[str, Expr]]) -> Optional[dict[str, Expr]]:
        if value is not None and str(value.get("exclusive", "")).strip() != "true":
            raise ValueError("every manufacturer's devices offer the exclusive view (a whole device): "
                             "give exclusive: 'true'")
        return value

    def offers(self, view: str) -> bool:
        """Whether any device of this manufacturer can offer ``view`` (it has a condition for it)."""
        return self.views is None or view in self.views

    def offered_views(self) -> list[str]:
        """The views this manufacturer's devices can offer, in :data:`VIEWS` order."""
        return [v for v in VIEWS if self.offers(v)]


class ManufacturerMessages(Strict):
    """str.format templates of rules/manufacturers.yaml ``messages``."""

    viewNotOffered: str = Field(description="a request for a view the manufacturer does not offer: "
                                            "{manufacturer}, {view}, {offered}")


class ManufacturerTableSpec(Strict):
    genericSentinel: str
    pciClassPrefixes: list[str] = []
    manufacturers: list[Manufacturer]
    messages: ManufacturerMessages

    def refusals(self, manu: "Manufacturer") -> dict[str, str]:
        """View -> the denial message (``messages.viewNotOffered``) for each view ``manu``'s devices
        never offer; empty when it offers all four."""
        offered = manu.offered_views()
        return {view: self.messages.viewNotOffered.format(manufacturer=manu.id, view=view,
                                                          offered=" and ".join(offered))
                for view in VIEWS if view not in offered}

    def classifier_rows(self, manufacturers: Optional[list["Manufacturer"]] = None) -> list[dict[str, Any]]:
        """The table as the classifier and the admission params read it: ``[{id, base, partitionKind,
        views, refusals}]`` in file order, of ``manufacturers`` (default: this table's; the Policy passes
        its own, with the agent's ``GPUSTACK_<ID>_*`` overrides applied)."""
        return [{"id": m.id, "base": m.base, "partitionKind": m.partitionKind, "views": m.offered_views(),
                 "refusals": self.refusals(m)} for m in (self.manufacturers if manufacturers is None
                                                         else manufacturers)]

    @field_validator("manufacturers")
    @classmethod
    def _unique(cls, value: list[Manufacturer]) -> list[Manufacturer]:
        seen = set()
        for m in value:
            if m.id in seen:
                raise ValueError(f"manufacturer {m.id!r} listed twice")
            seen.add(m.id)
        return value

    def by_id(self) -> dict[str, Manufacturer]:
        return {m.id: m for m in self.manufacturers}
