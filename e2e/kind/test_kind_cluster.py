"""The offline kind cluster (docs/tasks/e2e.md "The offline kind cluster"): e2e/kind/kind-up.sh end to end.

One cluster (1 control-plane + ``$ACCELPOLICY_KIND_TEST_WORKERS`` workers, default 3) is created for the
session from the locally built node image and deleted afterwards (conftest.py, kindcluster.py). Skipped, with the reason, when the
docker daemon cannot be started here or the node image was not built (``make kind-images``).
The refusal test needs neither: it forces a missing guard and asserts kind-up.sh creates nothing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from kindcluster import (HERE, K8S_VERSION, LEAVING_COUNTERS, SERVICE_BLACKHOLE, WORKERS, KindCluster,
                         docker_reachable, sh)

pytestmark = pytest.mark.kind

def test_kind_up_refuses_without_the_guard_and_creates_nothing():
    env = dict(os.environ, ACCELPOLICY_GUARD_TABLE="accelpolicy_guard_absent")
    result = subprocess.run(["bash", str(HERE / "kind-up.sh"), "--name", "accelpolicy-refused", "--workers", "0"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "nftables table inet accelpolicy_guard_absent is missing" in result.stderr \
        or "nft not installed" in result.stderr
    assert ("kind-up.sh: refusing to create cluster 'accelpolicy-refused': the network guard is incomplete"
            in result.stderr)
    assert "creating cluster" not in result.stdout
    if docker_reachable():
        ids = sh("docker", "ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster=accelpolicy-refused").stdout
        assert ids.strip() == ""


def test_all_nodes_ready(kind_cluster):
    nodes = kind_cluster.kubectl_json("get", "nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == kind_cluster.nodes
    assert len(nodes) == 1 + WORKERS
    for n in nodes:
        ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", (n["metadata"]["name"], ready)
        assert n["status"]["nodeInfo"]["kubeletVersion"] == K8S_VERSION
    control_planes = [n for n in nodes if "node-role.kubernetes.io/control-plane" in n["metadata"]["labels"]]
    assert len(control_planes) == 1


def test_api_server_published_on_loopback_only(kind_cluster):
    server = kind_cluster.kubectl("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
    assert server.startswith("https://127.0.0.1:")
    control_plane = f"{kind_cluster.name}-control-plane"
    ports = json.loads(sh("docker", "inspect", "-f", "{{json .NetworkSettings.Ports}}", control_plane).stdout)
    published = [b for bindings in ports.values() if bindings for b in bindings]
    assert published and all(b["HostIp"] == "127.0.0.1" for b in published), published


DNS_QUERY = r"""
import json, random, socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
qid = random.randrange(65536)
question = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0" + struct.pack("!HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
s.sendto(struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question, (server, 53))
data = s.recv(4096)
rid, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", data[:12])
pos = 12 + len(question)
answers = []
for _ in range(an):
    if data[pos] & 0xC0 == 0xC0: pos += 2
    else:
        while data[pos]: pos += data[pos] + 1
        pos += 1
    rtype, rclass, ttl, rdlen = struct.unpack("!HHIH", data[pos:pos + 10]); pos += 10
    if rtype == 1: answers.append(socket.inet_ntoa(data[pos:pos + rdlen]))
    pos += rdlen
print(json.dumps({"id_ok": rid == qid, "rcode": flags & 0xF, "answers": answers}))
"""


def dns_query(cluster: KindCluster, node: str, server: str, name: str) -> dict:
    """An A query sent from inside ``node``'s network namespace (host python via nsenter)."""
    pid = sh("docker", "inspect", "-f", "{{.State.Pid}}", node).stdout.strip()
    out = sh("nsenter", "--target", pid, "--net", sys.executable, "-c", DNS_QUERY, server, name).stdout
    return json.loads(out)


def test_coredns_answers_cluster_names_and_refuses_external_ones(kind_cluster):
    dns_ip = kind_cluster.kubectl("-n", "kube-system", "get", "service", "kube-dns", "-o", "jsonpath={.spec.clusterIP}")
    api_ip = kind_cluster.kubectl("get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP}")
    worker = kind_cluster.nodes[-1]
    answer = dns_query(kind_cluster, worker, dns_ip, "kubernetes.default.svc.cluster.local")
    assert answer == {"id_ok": True, "rcode": 0, "answers": [api_ip]}
    external = dns_query(kind_cluster, worker, dns_ip, "example.com")
    assert external == {"id_ok": True, "rcode": 5, "answers": []}  # 5 = REFUSED: no zone outside cluster.local
    corefile = kind_cluster.kubectl("-n", "kube-system", "get", "configmap", "coredns", "-o", "jsonpath={.data.Corefile}")
    assert "forward" not in corefile


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def test_service_cidr_blackholed_until_kube_proxy_was_up(kind_cluster):
    proxies = kind_cluster.kubectl_json("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-proxy")["items"]
    started = {p["spec"]["nodeName"]: epoch(p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
               for p in proxies}
    assert sorted(started) == kind_cluster.nodes
    for node in kind_cluster.nodes:
        events = [line.split() for line in
                  kind_cluster.node_exec(node, "cat", "/kind/accelpolicy/service-blackhole.log").splitlines()]
        added = [float(e[1]) for e in events if e[0] == "added" and e[2] == SERVICE_BLACKHOLE]
        programmed = [float(e[1]) for e in events if e[0] == "kube-proxy"]
        removed = [float(e[1]) for e in events if e[0] == "removed" and e[2] == SERVICE_BLACKHOLE]
        assert len(added) == len(programmed) == len(removed) == 1, (node, events)
        # startedAt has whole seconds: the blackhole was in place before that second ended
        assert added[0] < started[node] + 1, (node, added, started[node])
        assert added[0] < programmed[0] <= removed[0]
        routes = kind_cluster.node_exec(node, "ip", "route", "show", "type", "blackhole")
        assert SERVICE_BLACKHOLE not in routes and "10.244.0.0/16" in routes, (node, routes)


def test_no_image_was_pulled(kind_cluster):
    events = kind_cluster.kubectl_json("get", "events", "--all-namespaces")["items"]
    assert [e for e in events if e["reason"] in ("Pulling", "Failed", "ErrImagePull", "BackOff")
            and "image" in e.get("message", "").lower()] == []
    pulled = [e["message"] for e in events if e["reason"] == "Pulled"]
    assert all("already present on machine" in m for m in pulled), pulled
    for node in kind_cluster.nodes:
        preloaded = set(kind_cluster.node_exec(node, "cat", "/kind/accelpolicy/preloaded-images.txt").split())
        role = kind_cluster.node_exec(node, "cat", "/kind/accelpolicy/role").strip()
        listed = set(kind_cluster.node_exec(node, "cat", "/kind/images/list.txt").split())
        if role == "worker":
            listed = {i for i in listed if i.rsplit(":", 1)[0].rsplit("/", 1)[1] in ("kube-proxy", "coredns", "pause")}
        assert role == ("control-plane" if node.endswith("-control-plane") else "worker")
        assert preloaded == listed, node
        present = {name for name in kind_cluster.node_exec(node, "ctr", "-n", "k8s.io", "images", "ls", "-q").split()
                   if not name.startswith("sha256:")}
        assert present == listed, (node, present - listed)
        log = kind_cluster.node_exec(node, "journalctl", "-u", "containerd", "--no-pager", "-o", "cat")
        assert "PullImage" not in log, node


def test_nothing_left_the_machine_during_create(kind_cluster):
    before, after = kind_cluster.counters_before, kind_cluster.counters_after
    delta = {k: after[k] - before.get(k, 0) for k in after}
    print(f"\nguard counters during kind-up (packets): {delta}")
    for name in LEAVING_COUNTERS:
        assert delta[name] == 0, (name, delta)
    # nothing even tried: no forwarded packet between a docker bridge and another interface was dropped
    assert {k: v for k, v in delta.items() if k.startswith("forward ")} == {
        "forward docker0 to another interface": 0, "forward br-* to another interface": 0,
        "forward another interface to docker0": 0, "forward another interface to br-*": 0}
    assert sh("bash", str(HERE / "dockerd.sh"), "check", check=False).returncode == 0
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "0"
