"""Node facts as pool derivation reads them (docs/agent.md "Labels, annotations and NodeFeatures" and
"Normalization"; docs/concepts/pools-and-flavors.md "Pools and flavors" and "ResourceFlavors: what each node
contributes").

* Effective labels: where NodeFeatures name a node (label ``nfd.node.kubernetes.io/node-name``), the
  keys under the propagated prefixes are replaced by the union of their ``spec.labels`` — what NFD
  master (or the built-in propagation) makes the Node carry. Fit labels are exempt.
* gKey: the longest key under ``general.feature.gpustack.ai/`` whose remainder has no `.` and whose
  value is "true". aKeys: keys under ``acceleratable.feature.gpustack.ai/`` with value "true", no `.`,
  a `-`, and a known manufacturer before the first `-`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.devices.factcheck import FactProblem, count_problem, read_count, read_memory
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot, annotations_of, is_deleting, labels_of, name_of


@dataclass(frozen=True)
class NodeView:
    """One Node after propagation: its name, effective labels, annotations and parsed keys."""

    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    managed: bool
    gkey: str | None
    cores: int
    os: str
    arch: str
    akeys: dict[str, int] = field(default_factory=dict)  # aKey -> per-node count
    problems: tuple[FactProblem, ...] = ()  # labels refused (decision 19): their key counts 0


def trusted_node_features(policy: Policy, snapshot: Snapshot,
                          namespace: str | None = None) -> tuple[dict[str, list[dict]], list[str]]:
    """Decision 20: (node name -> the NodeFeatures that feed its keys, warnings for those ignored).

    Only NodeFeatures in the system namespace (``namespace``, else rules/controller.yaml
    ``systemNamespace``) named ``<node><suffix>`` for the NodeFeature suffixes of rules/agent.yaml
    (``nodeFeature.worker``/``deviceManager``) count. Another NodeFeature naming the node is ignored,
    with a warning when it carries a key under the propagated prefixes (rules/labels.yaml); one
    without such keys is none of our business (NFD's own worker writes one per node).
    """
    judge = node_feature_judge(policy, namespace)
    trusted: dict[str, list[dict]] = {}
    warnings: list[str] = []
    for nf in snapshot.list("NodeFeature"):
        node, is_trusted, warning = judge(nf)
        if is_trusted:
            trusted.setdefault(node, []).append(nf)
        elif warning:
            warnings.append(warning)
    return trusted, warnings


def node_feature_judge(policy: Policy, namespace: str | None = None):
    """The verdict of decision 20 on one NodeFeature, as a function ``nf -> (node name or None,
    trusted, warning or None)`` (see :func:`trusted_node_features`): the node it names (None when it
    names none or is being deleted), whether it feeds that node's keys, the warning when it is ignored."""
    node_key = policy.key("nodeFeatureNode")
    prefixes = tuple(policy.labels.propagatedPrefixes)
    system = namespace or policy.controller.systemNamespace
    nf_rules = agent_rules(policy).nodeFeature
    suffixes = (nf_rules.worker.nameSuffix, nf_rules.deviceManager.nameSuffix)
    messages = policy.node_facts.factChecks.messages

    def judge(nf: dict) -> tuple[str | None, bool, str | None]:  # inline reads: runs for every NodeFeature
        meta = nf.get("metadata") or {}
        node = (meta.get("labels") or {}).get(node_key)
        if not node or meta.get("deletionTimestamp"):
            return None, False, None
        ns, name = meta.get("namespace") or "", meta.get("name") or ""
        if ns == system and name.startswith(node) and name[len(node):] in suffixes:
            return node, True, None
        if not any(str(k).startswith(prefixes) for k in ((nf.get("spec") or {}).get("labels") or {})):
            return node, False, None
        if ns != system:
            return node, False, messages.foreignNodeFeature.format(namespace=ns, name=name, system=system,
                                                                   node=node, prefixes=", ".join(prefixes))
        return node, False, messages.nodeFeatureName.format(namespace=ns, name=name, node=node,
                                                            expected=" or ".join(node + s for s in suffixes))
    return judge


def effective_node_labels(policy: Policy, snapshot: Snapshot, namespace: str | None = None,
                          trusted: dict[str, list[dict]] | None = None) -> dict[str, dict[str, str]]:
    """Node name -> labels after NodeFeature propagation (see module docstring).

    Only the NodeFeatures :func:`trusted_node_features` keeps feed the propagated keys (decision 20);
    ``trusted``: its first result when the caller already has it.
    """
    if trusted is None:
        trusted = trusted_node_features(policy, snapshot, namespace)[0]
    return {name_of(node): node_effective_labels(policy, node, trusted.get(name_of(node), ()))
            for node in snapshot.list("Node")}


def node_effective_labels(policy: Policy, node: dict, features) -> dict[str, str]:
    """One Node's labels after propagation from ``features``, its trusted NodeFeatures in snapshot
    order (:func:`trusted_node_features`): with any, the keys under the propagated prefixes
    (rules/labels.yaml) are replaced by the union of their ``spec.labels`` (fit labels stay); a new dict."""
    labels = dict(labels_of(node))
    if not features:
        return labels
    prefixes = tuple(policy.labels.propagatedPrefixes)
    fit = policy.labels.fitLabelSuffix
    merged: dict[str, str] = {}
    for nf in features:
        for key, value in ((nf.get("spec") or {}).get("labels") or {}).items():
            merged[key] = str(value)
    labels = {
        k: v for k, v in labels.items() if not k.startswith(prefixes) or fit in k.split("/", 1)[0] + "/"}
    labels.update(merged)
    return labels


def read_node(policy: Policy, name: str, labels: dict[str, str], annotations: dict[str, str]) -> NodeView:
    """Parse one node's labels into a :class:`NodeView`."""
    general = policy.prefix("general")
    acc = policy.prefix("acceleratable")
    gkey = None
    akeys: dict[str, int] = {}
    problems: list[FactProblem] = []
    for key, value in labels.items():
        if value != "true":
            continue
        if key.startswith(general):
            rest = key[len(general):]
            if "." not in rest and (
                    gkey is None or len(rest) > len(gkey) or (len(rest) == len(gkey) and rest < gkey)):
                gkey = rest
        elif key.startswith(acc):
            rest = key[len(acc):]
            if "." in rest or "-" not in rest or policy.manufacturer_of_key(rest) is None:
                continue
            akeys[rest] = _count(policy, name, labels, f"{acc}{rest}{policy.suffix('count')}", rest, problems)
            if akeys[rest] and not _descriptors_sound(policy, name, labels, f"{acc}{rest}", rest, problems):
                akeys[rest] = 0
    cores = _count(policy, name, labels, f"{general}{gkey}{policy.suffix('count')}", "",
                   problems) if gkey else 0
    managed = bool(policy.derivation.managed.evaluate({"labels": labels,
                                                       "managedKey": policy.key("managed")}))
    return NodeView(
        name=name, labels=labels, annotations=annotations, managed=managed, gkey=gkey, cores=cores,
        os=labels.get(policy.key("os"), ""), arch=labels.get(policy.key("arch"), ""),
        akeys=dict(sorted(akeys.items())), problems=tuple(sorted(problems, key=lambda p: p.key)),
    )


def _descriptors_sound(policy: Policy, node: str, labels: dict[str, str], base: str, akey: str,
                       problems: list[FactProblem]) -> bool:
    """Decision 19 for the descriptors a derived InstanceType copies (create-only, so a bad value
    would stay): ``<aKey>.memory`` a quantity, ``<aKey>.cores`` an integer in range."""
    suffixes = agent_rules(policy).suffixes
    sound = True
    memory_key = f"{base}{suffixes.memory}"
    reason = read_memory(policy, labels.get(memory_key))
    if reason:
        problems.append(count_problem(policy, node, memory_key, labels[memory_key], reason, akey))
        sound = False
    cores_key = f"{base}{suffixes.cores}"
    value = labels.get(cores_key)
    _, reason = read_count(policy, value)
    if reason and not (reason == "outOfRange" and value.strip() == "0"):  # .cores is written even when 0
        problems.append(count_problem(policy, node, cores_key, value, reason, akey))
        sound = False
    return sound


def _count(policy: Policy, node: str, labels: dict[str, str], key: str, akey: str,
           problems: list[FactProblem]) -> int:
    """The count label ``key`` (decision 19): 0 and a problem appended when it is refused."""
    value = labels.get(key)
    count, reason = read_count(policy, value)
    if reason:
        problems.append(count_problem(policy, node, key, value, reason, akey))
    return count


def node_views(policy: Policy, snapshot: Snapshot, effective: dict[str, dict[str, str]] | None = None,
               namespace: str | None = None) -> list[NodeView]:
    """Every Node of the snapshot (deleting ones excluded), in name order.

    ``effective``: :func:`effective_node_labels` of ``snapshot`` when the caller already has it;
    ``namespace``: the system namespace whose NodeFeatures count (decision 20; None: the rules').
    """
    if effective is None:
        effective = effective_node_labels(policy, snapshot, namespace)
    views = []
    for node in snapshot.list("Node"):
        if is_deleting(node):
            continue
        name = name_of(node)
        views.append(read_node(policy, name, effective[name], dict(annotations_of(node))))
    return views
