"""Which API verbs each accelpolicy component needs, derived from its code (least privilege: docs/tasks/install.md "With Helm").

The controller talks to the API server through :class:`runtime.kube.session.Session` (its watch
caches, :class:`runtime.kube.applier.Applier`, the leader Lease, the serving-certificate Secret);
the agent through the same parts, narrowed to one node (:class:`runtime.agent.cluster.NodeCluster`:
its watched kinds, its applier calls). This module reads those call sites from the source (``ast``) and the data they are driven by (the watched
kinds, the kinds the admission view reads, the plan's ``Action(verb, kind, ...)`` constructors) and
returns ``{(apiGroup, resource): {verbs}}`` per scope:

* ``cluster``: a ClusterRole (cluster-scoped kinds, or namespaced kinds in every namespace);
* ``system``: a Role in the system namespace (kinds touched only there: the call site passes the
  settings/lease namespace).

Call sites whose object kind cannot be read from the source are listed in :data:`OBJECT_KINDS`
(by module, function, method and argument text); an unlisted one raises :class:`Underived`, so a
new API call makes the RBAC test fail until it is accounted for.
"""
from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

import yaml

from runtime.engine.plan import Verb

REPO = Path(__file__).resolve().parents[2]

HTTP_VERBS = {"get": "get", "post": "create", "put": "update", "patch": "patch", "delete": "delete"}
# Kinds outside runtime.engine.snapshot.KNOWN_KINDS that the controller writes.
EXTRA_KINDS = {"Lease": ("coordination.k8s.io/v1", True), "Event": ("v1", True),
               "MutatingWebhookConfiguration": ("admissionregistration.k8s.io/v1", False),
               "ValidatingWebhookConfiguration": ("admissionregistration.k8s.io/v1", False),
               "Report": ("openreports.io/v1alpha1", True), "ClusterReport": ("openreports.io/v1alpha1", False),
               "ClusterRole": ("rbac.authorization.k8s.io/v1", False),
               "EndpointSlice": ("discovery.k8s.io/v1", True)}

# Call sites whose object comes from a variable: (module, function, applier method, argument) -> kinds.
OBJECT_KINDS = {
    ("runtime/controller/actions.py", "create_event", "create", "event"): ("Event",),
    ("runtime/controller/registrar.py", "sync", "apply", "desired"):
        ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"),
    ("runtime/controller/registrar.py", "sync", "merge_patch", "kind"):
        ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"),
    ("runtime/controller/registrar.py", "sync", "delete", "stale"):
        ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"),
    ("runtime/controller/backgroundaudit.py", "run_once", "apply", "body"): ("Report", "ClusterReport"),
    ("runtime/reload/report.py", "record_event", "create", "body"): ("Event",),
    ("runtime/reload/board.py", "save_serving", "apply", "body"): ("ConfigMap",),
    ("runtime/controller/backgroundaudit.py", "run_once", "create", "failed_event(template, failing[key], now)"): ("Event",),
    ("runtime/controller/cabundle.py", "publish", "apply", "ca_configmap(self.namespace, self.name, ca_pem)"):
        ("ConfigMap",),
    ("runtime/controller/exceptions.py", "_write", "apply_status", "body"): ("PolicyException",),
    ("runtime/controller/exceptions.py", "_event", "create", "body"): ("Event",),
}
# Modules calling Session.call directly on one kind's objects (their own paths).
SESSION_MODULES = {"runtime/controller/leader.py": "Lease", "runtime/controller/servingcert.py": "Secret",
                   "runtime/controller/deviceclasses.py": "DeviceClass",   # the feature check (docs/concepts/dra.md "The ledger from claims")
                   "runtime/reload/board.py": "ConfigMap",                # the rules ConfigMap: the one verdict
                   "runtime/reload/replicas.py": "EndpointSlice"}         # where the admission replicas answer
# Session calls on a collection: their RBAC verb (a GET of a list is ``list``).
SESSION_VERBS = {"runtime/reload/replicas.py": {"list"}}
# Functions/modules whose writes go to the system namespace only (settings store, Lease, certificate).
SYSTEM_SCOPED = {"runtime/controller/leader.py": None, "runtime/controller/servingcert.py": None,
                 "runtime/controller/cabundle.py": None,
                 "runtime/controller/settingsview.py": None,
                 "runtime/controller/reconciler.py": {"seed_settings"},
                 "runtime/reload/board.py": None, "runtime/reload/replicas.py": None,
                 "runtime/reload/report.py": {"record_event"}}
# Not RBAC-checked: every authenticated user may create a SelfSubjectReview (system:basic-user).
NOT_AUTHORIZED_HERE = {"runtime/kube/session.py": "selfsubjectreviews (Session.username)"}


class Underived(AssertionError):
    """A call site whose kind or verb this module cannot read."""


@functools.lru_cache(maxsize=None)
def _tree(rel: str) -> ast.Module:
    """The parsed module (once: :func:`_module_consts` follows every ``from runtime... import`` again
    for each importer, thousands of times for the controller's modules; never mutated)."""
    return ast.parse((REPO / rel).read_text(), rel)


def _functions(tree: ast.AST):
    """(function name, node) for every def, methods included, and ``("<module>", ...)`` for the module's
    top-level assignments (tables of lambdas that build Actions, e.g. controller/instances.py)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
    if isinstance(tree, ast.Module):
        yield "<module>", ast.Module(body=[s for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign))],
                                     type_ignores=[])


@functools.lru_cache(maxsize=None)
def _imported_consts(rel: str) -> dict[str, str]:
    """:func:`_module_consts` of an imported module, once per module (import chains share modules:
    without it the walk grows exponentially with their depth)."""
    return _module_consts(_tree(rel))


def _module_consts(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and _str(node.value, {}) is not None:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = _str(node.value, {})
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("runtime."):
            src = node.module.replace(".", "/") + ".py"
            if (REPO / src).exists():
                consts = _imported_consts(src)
                for alias in node.names:
                    if alias.name in consts:
                        out[alias.asname or alias.name] = consts[alias.name]
    return out


@functools.lru_cache(maxsize=None)
def _imported_consts(rel: str) -> dict[str, str]:
    """:func:`_module_consts` of module ``rel``, once per module (an import graph is walked once, not
    once per path through it)."""
    return _module_consts(_tree(rel))


def _str(node: ast.AST, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "Verb":   # the controller's action vocabulary
        return Verb[node.attr].value
    return None


def resource_of(kind: str) -> tuple[str, str, bool]:
    """``(apiGroup, plural, namespaced)`` of ``kind``: our CRDs' own names (crds/), else the
    Kubernetes plural (lowercase + s/es)."""
    from runtime.engine.snapshot import KNOWN_KINDS

    api_version, namespaced = KNOWN_KINDS.get(kind) or EXTRA_KINDS[kind]
    group = api_version.rpartition("/")[0]
    for crd in (REPO / "crds").glob("*.yaml"):
        doc = yaml.safe_load(crd.read_text())
        if doc["spec"]["names"]["kind"] == kind:
            return doc["spec"]["group"], doc["spec"]["names"]["plural"], doc["spec"]["scope"] == "Namespaced"
    plural = kind.lower() + ("es" if kind.lower().endswith("s") else "s")
    return group, plural, namespaced


# -- the Applier: which HTTP calls each method makes ------------------------------------------------------
def applier_calls() -> dict[str, list[tuple[str, str]]]:
    """``{Applier method: [(verb, subresource or "")]}`` from runtime/kube/applier.py, with the calls of
    the methods each one calls (``self.<method>``, nested functions included)."""
    tree = _tree("runtime/kube/applier.py")
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Applier")
    direct: dict[str, list[tuple[str, str]]] = {}
    calls_self: dict[str, set[str]] = defaultdict(set)
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        calls = []
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and ast.unparse(node.func.value) == "self":
                calls_self[fn.name].add(node.func.attr)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "call" \
                    and ast.unparse(node.func.value) == "self.session":
                method = _str(node.args[0], {})
                sub = ""
                path = node.args[1]
                if isinstance(path, ast.Call) and len(path.args) >= 4:
                    sub = _str(path.args[3], {}) or ""
                calls.append((HTTP_VERBS[method], sub))
                # server-side apply creates a missing object, which RBAC authorizes as "create" too
                if any(k.arg == "content_type" and ast.unparse(k.value) == "APPLY_PATCH" for k in node.keywords) \
                        and not sub:
                    calls.append(("create", sub))
        direct[fn.name] = calls
    out: dict[str, list[tuple[str, str]]] = {}
    for name in direct:
        seen, todo, acc = set(), [name], []
        while todo:
            n = todo.pop()
            if n in seen or n not in direct:
                continue
            seen.add(n)
            acc += direct[n]
            todo += sorted(calls_self[n])
        if acc:
            out[name] = acc
    return out


# -- the controller ---------------------------------------------------------------------------------------
def _execute_dispatch() -> dict[str, list[str]]:
    """``{Action verb: [Applier methods]}`` from ActionWriter.execute (and the helpers it calls)."""
    rel = "runtime/controller/actions.py"
    tree = _tree(rel)
    consts = _module_consts(tree)
    methods = dict(_functions(tree))
    out: dict[str, list[str]] = {}

    def applier_methods(body) -> list[str]:
        found = []
        for stmt in body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    owner = ast.unparse(node.func.value)
                    if owner in ("applier", "self.applier"):
                        found.append(node.func.attr)
                    elif owner == "self" and node.func.attr in methods and node.func.attr != "execute":
                        found += applier_methods(methods[node.func.attr].body)
        return found

    # execute dispatches through the class's _handlers table: {Verb.X: handler method}
    table = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
                 and any(isinstance(t, ast.Name) and t.id == "_handlers" for t in n.targets))
    for key, value in zip(table.keys, table.values):
        verb = _str(key, consts)
        if verb is None or not isinstance(value, ast.Name) or value.id not in methods:
            raise Underived(f"{rel}: _handlers entry {ast.unparse(key)}: {ast.unparse(value)}")
        out[verb] = applier_methods(methods[value.id].body)
    return out


def _system_scoped(rel: str, function: str) -> bool:
    if rel not in SYSTEM_SCOPED:
        return False
    names = SYSTEM_SCOPED[rel]
    return names is None or function in names


def controller_needs() -> dict[str, dict[tuple[str, str], set[str]]]:
    """The controller's needs: ``{"cluster"|"system": {(apiGroup, resource): verbs}}``."""
    from runtime.cli.common import load_policy
    from runtime.controller.reconciler import WATCHED
    from runtime.engine.admission import view_kinds
    from runtime.controller.registrar import OWNER_KIND
    from runtime.engine.admission.registration import KINDS

    needs: dict[str, dict[tuple[str, str], set[str]]] = {"cluster": defaultdict(set), "system": defaultdict(set)}

    def need(kind: str, verbs, system: bool, sub: str = "") -> None:
        group, plural, namespaced = resource_of(kind)
        scope = "system" if system and namespaced else "cluster"
        needs[scope][(group, plural + (f"/{sub}" if sub else ""))].update(verbs)

    # watch caches (runtime/kube/cache.py lists with GET on the collection, then watches)
    for kind in set(WATCHED) | set(view_kinds(load_policy(None))) - {"Secret", "Setting"}:
        need(kind, {"list", "watch"}, False)
    for kind in ("Secret", "Setting"):  # Controller.__init__: WatchedKind(kind, namespace=settings namespace)
        need(kind, {"list", "watch"}, True)
    for kind in (*KINDS.values(), OWNER_KIND):  # WebhookRegistrar's own cache (the owner: watched by name)
        need(kind, {"list", "watch"}, False)
    from runtime.controller.deviceclasses import KIND as DEVICE_CLASS
    need(DEVICE_CLASS, {"list", "watch"}, False)   # Controller.__init__: watched where the cluster serves it

    applier = applier_calls()
    dispatch = _execute_dispatch()
    for path in sorted((REPO / "runtime").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel.startswith(("runtime/kube/", "runtime/localcluster/", "runtime/agent/")) or "/cli/" in rel \
                or rel in ADMISSION_MODULES:   # the admission process's own (admission_needs)
            continue
        tree = _tree(rel)
        consts = _module_consts(tree)
        for fname, fn in _functions(tree):
            if fname in ("execute", "_apply_check_state") or fname.startswith("_do_"):
                continue  # reached through the Actions below
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                if isinstance(func, ast.Name) and func.id == "Action":
                    verb, kind = _str(node.args[0], consts), _str(node.args[1], consts)
                    if verb is None or kind is None or verb not in dispatch:
                        raise Underived(f"{rel}:{node.lineno}: {ast.unparse(node)[:80]}")
                    for method in dispatch[verb]:
                        for http, sub in applier[method]:
                            need(kind, {http}, _system_scoped(rel, fname), sub)
                elif isinstance(func, ast.Attribute) and ast.unparse(func.value).split(".")[-1] == "applier" \
                        and func.attr in applier:   # applier, self.applier, self.controller.applier, ...
                    first = node.args[0] if node.args else None
                    kind = _str(first, consts)
                    if kind is None and isinstance(first, ast.Dict):
                        kind = next((_str(v, consts) for k, v in zip(first.keys, first.values)
                                     if _str(k, {}) == "kind"), None)
                    kinds = (kind,) if kind else OBJECT_KINDS.get((rel, fname, func.attr, ast.unparse(first)))
                    if not kinds:
                        raise Underived(f"{rel}:{node.lineno} ({fname}): applier.{func.attr}({ast.unparse(first)})")
                    for k in kinds:
                        for http, sub in applier[func.attr]:
                            need(k, {http}, _system_scoped(rel, fname), sub)
                elif isinstance(func, ast.Attribute) and func.attr in ("call", "stream") \
                        and ast.unparse(func.value) in ("self.session", "session"):
                    if rel not in SESSION_MODULES:
                        raise Underived(f"{rel}:{node.lineno}: session.{func.attr} on an unknown kind")
                    verbs = SESSION_VERBS.get(rel) or {HTTP_VERBS[_str(node.args[0], {})]}
                    need(SESSION_MODULES[rel], verbs, _system_scoped(rel, fname))
    return {scope: dict(table) for scope, table in needs.items()}


def _builds_board(function: ast.AST) -> bool:
    """Whether ``function`` builds a :class:`runtime.reload.board.Board` (it then reads the rules ConfigMap)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "Board"
               for n in ast.walk(function))


# -- the agent --------------------------------------------------------------------------------------------
AGENT_MODULE = "runtime/agent/cluster.py"
# NodeCluster call sites whose object comes from a variable: (function, applier method) -> kinds.
AGENT_OBJECT_KINDS = {("upsert", "update"): ("NodeFeature", "Devices"),
                      ("write_status", "update_status"): ("Devices",),
                      ("delete_owned", "delete"): ("NodeFeature", "Devices"),
                      ("warn", "create"): ("Event",)}
# Kinds the agent touches in its own namespace only (its NodeFeatures, the settings Secret).
AGENT_SYSTEM_KINDS = {"NodeFeature", "Secret"}


def agent_needs() -> dict[str, dict[tuple[str, str], set[str]]]:
    """The agent's needs: ``{"cluster"|"system": {(apiGroup, resource): verbs}}``.

    List and watch of every kind :func:`runtime.agent.cluster.node_watches` caches; the HTTP calls of
    every applier method :class:`runtime.agent.cluster.NodeCluster` calls, on the kind its first
    argument names (a literal) or :data:`AGENT_OBJECT_KINDS`; ``subresource="status"`` keywords.
    NodeFeatures and the settings Secret live in the system namespace.
    """
    from runtime.agent.cluster import node_watches
    from runtime.cli.common import load_policy

    needs: dict[str, dict[tuple[str, str], set[str]]] = {"cluster": defaultdict(set), "system": defaultdict(set)}

    def need(kind: str, verbs, sub: str = "") -> None:
        group, plural, _ = resource_of(kind)
        scope = "system" if kind in AGENT_SYSTEM_KINDS else "cluster"
        needs[scope][(group, plural + (f"/{sub}" if sub else ""))].update(verbs)

    for watched in node_watches(load_policy(None), "node", "system", "system", dra=True):   # the dra backend's too
        need(watched.kind, {"list", "watch"})
    for fname, function in _functions(_tree("runtime/cli/agent.py")):   # --rules-configmap: the one verdict
        if _builds_board(function):
            needs["system"][resource_of(BOARD_READ[0])[:2]].add(BOARD_READ[1])
    applier = applier_calls()
    tree = _tree(AGENT_MODULE)
    for fname, fn in _functions(tree):
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and ast.unparse(node.func.value) == "self.applier"):
                continue
            kind = _str(node.args[0], {}) if node.args else None
            kinds = (kind,) if kind else AGENT_OBJECT_KINDS.get((fname, node.func.attr))
            if not kinds or node.func.attr not in applier:
                raise Underived(f"{AGENT_MODULE}:{node.lineno} ({fname}): applier.{node.func.attr}")
            status = any(k.arg == "subresource" and _str(k.value, {}) == "status" for k in node.keywords)
            for k in kinds:
                for http, sub in applier[node.func.attr]:
                    need(k, {http}, "status" if status else sub)
    return {scope: dict(table) for scope, table in needs.items()}


# -- the admission replicas (docs/availability.md "Admission apart from reconciling") ---------------------
ADMISSION_MODULES = ("runtime/controller/admission.py", "runtime/cli/admission.py")
# The admission process's reads through Session.call (module, function) -> the kind it gets, in the
# system namespace: the only session calls it may make (a get; anything else there is a write).
ADMISSION_READS: dict = {}
# The reads of the one verdict (runtime/reload/board.py, Board.read: a get of the rules ConfigMap): a component
# whose module builds a Board reads it.
BOARD_READ = ("ConfigMap", "get")


def admission_needs() -> dict[str, dict[tuple[str, str], set[str]]]:
    """The admission process's needs: ``{"cluster"|"system": {(apiGroup, resource): verbs}}``.

    List and watch of every kind :func:`runtime.controller.admission.admission_watched` caches (the settings
    Secret in the system namespace); ``get`` of the serving certificate's Secret
    (:class:`runtime.controller.servingcert.ServingCertificate` with ``manage`` off reads it, and the only
    other session calls it makes are its writes, reached only when it manages the Secret); ``get`` of the
    kinds :data:`ADMISSION_READS` names where its functions read them. Any other applier or session call
    in the admission modules raises :class:`Underived`: it writes nothing.
    """
    from runtime.cli.common import load_policy
    from runtime.controller.admission import admission_watched

    needs: dict[str, dict[tuple[str, str], set[str]]] = {"cluster": defaultdict(set), "system": defaultdict(set)}

    def need(kind: str, verbs, system: bool) -> None:
        group, plural, namespaced = resource_of(kind)
        needs["system" if system and namespaced else "cluster"][(group, plural)].update(verbs)

    for watched in admission_watched(load_policy(None), "system"):
        need(watched.kind, {"list", "watch"}, watched.namespace is not None)
    for rel in ADMISSION_MODULES:
        for fname, function in _functions(_tree(rel)):
            if _builds_board(function):
                need(BOARD_READ[0], {BOARD_READ[1]}, True)
            for node in ast.walk(function):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                        ast.unparse(node.func.value).split(".")[-1] in ("applier", "session")
                        and node.func.attr in ("call", "stream", *applier_calls()))):
                    continue
                read = ADMISSION_READS.get((rel, fname))
                verb = node.args[0] if node.args else None
                if read is not None and node.func.attr == "call" and isinstance(verb, ast.Constant) \
                        and verb.value == "get":
                    need(read, {"get"}, True)
                    continue
                raise Underived(f"{rel}:{node.lineno}: {ast.unparse(node)[:80]} (the admission process writes nothing)")
    need("Secret", {"get"}, True)   # ServingCertificate._read
    return {scope: dict(table) for scope, table in needs.items()}
