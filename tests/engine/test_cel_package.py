"""Every module of the rules package and of its CEL package is held to a layer of the import contracts in
pyproject.toml (docs/architecture.md "The CEL package"): a module no layer names is outside every
contract, so nothing keeps its imports in order.

For each ``layers`` contract whose container is ``runtime.rules`` or below it, the container's modules
and packages (its ``.py`` files and its folders with an ``__init__.py``) are exactly the modules its
layers name.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = "runtime.rules"


def contracts() -> dict[str, set[str]]:
    """``{container: the modules its layers name}`` of every layers contract inside ``runtime.rules``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    out: dict[str, set[str]] = {}
    for contract in config:
        if contract.get("type") != "layers":
            continue
        for container in contract.get("containers") or []:
            if container == RULES or container.startswith(RULES + "."):
                out.setdefault(container, set()).update(
                    module.strip() for layer in contract["layers"] for module in layer.split("|"))
    return out


def modules_of(container: str) -> set[str]:
    """The modules and packages directly inside the package ``container`` (``__init__`` aside)."""
    folder = ROOT.joinpath(*container.split("."))
    files = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in folder.glob("*/__init__.py")}
    return files | packages


def packages_below(container: str) -> set[str]:
    """``container`` and every package below it."""
    folder = ROOT.joinpath(*container.split("."))
    return {container} | {".".join(p.parent.relative_to(ROOT).parts) for p in folder.rglob("*/__init__.py")}


def mismatches(listed: dict[str, set[str]], found: dict[str, set[str]]) -> dict[str, tuple[list, list]]:
    """``{container: (modules no layer names, layers naming no module)}`` where they differ."""
    out = {}
    for container in sorted(set(listed) | set(found)):
        unnamed = sorted(found.get(container, set()) - listed.get(container, set()))
        stale = sorted(listed.get(container, set()) - found.get(container, set()))
        if unnamed or stale:
            out[container] = (unnamed, stale)
    return out


def test_the_cel_package_and_its_library_each_have_a_contract():
    assert {"runtime.rules", "runtime.rules.cel", "runtime.rules.cel.library"} <= set(contracts())


def test_every_module_of_the_rules_and_cel_packages_is_in_a_layer():
    listed = contracts()
    found = {container: modules_of(container) for container in listed}
    assert mismatches(listed, found) == {}
    # every package of the CEL package that holds modules has a contract of its own
    with_modules = {p for p in packages_below(f"{RULES}.cel") if modules_of(p)}
    assert sorted(with_modules - set(listed)) == []


def test_the_check_sees_a_module_left_out_and_a_stale_layer():
    listed = contracts()
    found = {container: modules_of(container) for container in listed}
    found["runtime.rules.cel"] = found["runtime.rules.cel"] | {"optimize"}
    found["runtime.rules.cel.library"] = found["runtime.rules.cel.library"] - {"quantities"}
    assert mismatches(listed, found) == {"runtime.rules.cel": (["optimize"], []),
                                         "runtime.rules.cel.library": ([], ["quantities"])}
