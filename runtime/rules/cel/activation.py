"""cel-python's Activation without its per-name costs, and the transpiling runner that uses it.

cel-python's activation resolves every name the program reads through ``typing.cast(Union[...], ...)``,
whose ``Union`` subscription costs ~14 us a call (about 15 % of a slice Pod review):
:class:`Activation` is the same resolution without it; :class:`Runner` is cel-python's
``CompiledRunner`` evaluating with it. Used by :mod:`runtime.rules.cel.runtime` and
:mod:`runtime.rules.cel.evaluate`.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import celpy
import celpy.evaluation as _celeval


class Activation(_celeval.Activation):
    """cel-python's Activation with the name resolution of its ``__getattr__`` (value, else container,
    else annotation; a name not found is a function) minus its per-call ``typing.cast(Union[...])``
    and debug logging; ``clone()`` (one per evaluation) and ``nested_activation()`` (one per macro
    body) keep the class.

    Without a package (the only case here: the environment has none) a name resolves to the innermost
    container of the chain that holds it, which is what cel-python's ``NameContainer.resolve_name``
    finds with package ``None``; it is looked up directly, without building the lists of candidate
    paths and keys (and the debug line formatting them) that ``resolve_name`` makes on every call."""

    def clone(self) -> "Activation":
        """A copy with its own identifiers (cel-python's ``Activation.clone``)."""
        clone = Activation.__new__(Activation)
        clone.identifiers = self.identifiers.clone()
        clone.functions = self.functions.copy()
        clone.package = self.package
        return clone

    def nested_activation(self, annotations: Any = None, vars: Any = None) -> "Activation":  # noqa: A002
        """cel-python's ``nested_activation`` (a macro's bound variable over this activation), keeping
        the class: without it, every name a ``map``/``filter``/``all``/``exists`` body reads went
        through cel-python's own ``__getattr__`` again. Built directly: a container chained to this
        activation's, holding the bound variable, and this activation's functions (cel-python wraps
        them in one more ``ChainMap`` over the same built-ins, which finds the same functions)."""
        if annotations is not None:
            return Activation(annotations=annotations, vars=vars, functions=self.functions,
                               package=self.package, based_on=self)
        nested = Activation.__new__(Activation)
        nested.identifiers = name_container(self.identifiers, vars) if vars else _celeval.NameContainer(
            parent=self.identifiers)
        nested.functions = self.functions
        nested.package = self.package
        return nested

    def __getattr__(self, name: str) -> Any:
        if self.package:
            try:
                referent = self.identifiers.resolve_name(self.package, name)
            except KeyError:
                return self.functions[name]
        else:
            container = self.identifiers
            while container is not None:
                referent = _dict_get(container, name)
                if referent is not None:
                    break
                container = container.parent
            else:
                return self.functions[name]
        if referent._value_set:
            return referent.value
        if referent.container:
            return referent.container
        if referent.annotation:
            return referent.annotation
        raise RuntimeError(f"Corrupt {self!r}")

    get = __getattr__


_dict_get = dict.get
_IDENT = re.compile(_celeval.IDENT + r"\Z")


def name_container(parent: Any, values: Mapping[str, Any]) -> Any:
    """A ``NameContainer`` chained to ``parent`` holding ``values`` (plain identifiers), each as a
    ``Referent`` with its value set: what ``NameContainer.load_values`` makes of them, without its
    per-name path regexes."""
    container = _celeval.NameContainer(parent=parent)
    for name, value in values.items():
        if type(name) is not str or not _IDENT.match(name):
            container.load_values({name: value})  # a dotted or odd name: cel-python's own nesting (or error)
            continue
        referent = _celeval.Referent()
        referent._value = value
        referent._value_set = True
        container[name] = referent
    return container


class Runner(celpy.CompiledRunner):
    """cel-python's transpiling runner, evaluating with :class:`Activation`."""

    def new_activation(self) -> Activation:
        """The runner's base activation (the environment's package and annotations, its functions)."""
        return Activation(package=self.environment.package, annotations=self.environment.annotations,
                           functions=self.functions)
