"""docs/architecture.md stays a true map: what it names exists, and every package and layer is named.

Names are the dotted module names in backticks (`runtime.kube`, `probes`); "every runtime package" is
every directory below runtime/ holding an ``__init__.py``; "every layer" is every module a ``layers``
contract of pyproject.toml lists (with its container).
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
NAME = re.compile(r"`((?:runtime|probes|testing)(?:\.[a-z_]+)*)`")


def named(text: str) -> set[str]:
    """Every dotted module name the page spells in backticks."""
    return set(NAME.findall(text))


def exists(name: str) -> bool:
    """``name`` is a module, or an attribute of one (`runtime.kube.session.connect`)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            value = importlib.import_module(module)
            for attr in parts[cut:]:
                if not hasattr(value, attr):
                    return False
                value = getattr(value, attr)
            return True
    return False


def runtime_packages() -> set[str]:
    """``runtime.x.y`` of every directory below runtime/ (the root itself aside) with an ``__init__.py``."""
    return {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "runtime").rglob("*/__init__.py")}


def layer_modules() -> set[str]:
    """Every module named by a ``layers`` contract (siblings split at ``|``, prefixed with the container)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    out = set()
    for contract in config:
        if contract.get("type") != "layers":
            continue
        containers = contract.get("containers") or [""]
        for layer in contract["layers"]:
            for module in (m.strip() for m in layer.split("|")):
                out.update(f"{c}.{module}" if c else module for c in containers)
    return out


def test_every_name_on_the_page_exists():
    missing = sorted(n for n in named(PAGE.read_text()) if not exists(n))
    assert missing == []


def test_every_runtime_package_and_layer_is_on_the_page():
    page = named(PAGE.read_text())
    assert sorted(runtime_packages() - page) == []
    assert sorted(layer_modules() - page) == []


def test_the_checks_see_a_stale_page():
    """A renamed package is caught both ways: the old name does not exist, the new one is not named."""
    stale = PAGE.read_text().replace("`runtime.report`", "`runtime.reports`")
    assert "runtime.reports" in named(stale) and not exists("runtime.reports")
    assert "runtime.report" in runtime_packages() - named(stale)
