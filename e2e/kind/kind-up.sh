#!/usr/bin/env bash
# Create the offline kind cluster (docs/tasks/e2e.md "The offline kind cluster"): 1 control-plane + N workers from the locally built
# node image, behind the network guard.
#
# Usage: e2e/kind/kind-up.sh [--name NAME] [--workers N] [--dra-workers D]
#   NAME    cluster name (default $ACCELPOLICY_KIND_CLUSTER or accelpolicy)
#   N       worker nodes (default $ACCELPOLICY_KIND_WORKERS or 3: with the control plane, the seed's 4 nodes)
#   D       extra workers after those N (default $ACCELPOLICY_KIND_DRA_WORKERS or 0) whose accelerators come
#           from a DRA driver (e2e/kind/draworker.py); kind names them after the N (-worker<N+1>, ...)
# Prints the kubeconfig path last: $ACCELPOLICY_CACHE/kind/clusters/NAME/kubeconfig (outside the clone).
#
# Refuses (exit 1, nothing created) unless `e2e/kind/dockerd.sh check` passes. Then:
#   - kind create cluster with our node image, API server published on 127.0.0.1 only, no default CNI,
#     kubelet failCgroupV1: false (this host is cgroup v1); nodes run unprivileged (shim/docker);
#   - CoreDNS's Corefile replaced by one serving cluster names only (its binary has no `forward`), before
#     any CoreDNS Pod can start (nodes stay NotReady until the next step);
#   - each node gets a bridge CNI config for its own podCIDR and routes to the other nodes' podCIDRs;
#   - waits for every node Ready and CoreDNS available.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
export ACCELPOLICY_CACHE="$cache"
name="${ACCELPOLICY_KIND_CLUSTER:-accelpolicy}"
workers="${ACCELPOLICY_KIND_WORKERS:-3}"
dra_workers="${ACCELPOLICY_KIND_DRA_WORKERS:-0}"
while (($#)); do
  case "$1" in
    --name) name="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --dra-workers) dra_workers="$2"; shift 2 ;;
    *) sed -n '2,10p' "$0" >&2; exit 2 ;;
  esac
done
[[ "$workers" =~ ^[0-9]+$ ]] || { echo "kind-up.sh: --workers must be a whole number, got '$workers'" >&2; exit 2; }
[[ "$dra_workers" =~ ^[0-9]+$ ]] || { echo "kind-up.sh: --dra-workers must be a whole number, got '$dra_workers'" >&2; exit 2; }

start_ms=$(( $(date +%s%N) / 1000000 ))
say() { local ms=$(( $(date +%s%N) / 1000000 - start_ms )); printf 'kind-up: %s (%d.%ds)\n' "$*" $((ms / 1000)) $((ms % 1000 / 100)); }

if ! bash "$here/dockerd.sh" check; then
  echo "kind-up.sh: refusing to create cluster '$name': the network guard is incomplete (see above; run: bash e2e/kind/dockerd.sh start)" >&2
  exit 1
fi

image="$(bash "$here/node-image.sh" --print-tag)"
docker image inspect "$image" >/dev/null 2>&1 || { echo "kind-up.sh: node image $image is not built; run: make kind-images" >&2; exit 1; }
kind_bin="$(bash "$here/build-tools.sh" --print | awk '$1=="kind" {print $2}')"
kubectl_bin="$(bash "$here/build-tools.sh" --print | awk '$1=="kubectl" {print $2}')"
[[ -x "$kind_bin" && -x "$kubectl_bin" ]] || { echo "kind-up.sh: kind or kubectl not built; run: make kind-images" >&2; exit 1; }

if grep -qx "$name" <<<"$("$kind_bin" get clusters 2>/dev/null)"; then
  echo "kind-up.sh: cluster '$name' already exists (kubeconfig $cache/kind/clusters/$name/kubeconfig); delete it first: make kind-down KIND_CLUSTER=$name" >&2
  exit 1
fi
dir="$cache/kind/clusters/$name"
mkdir -p "$dir"
kubeconfig="$dir/kubeconfig"
service_subnet=10.96.0.0/16
pod_subnet=10.244.0.0/16
{
  cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $name
networking:
  ipFamily: ipv4
  apiServerAddress: 127.0.0.1
  disableDefaultCNI: true
  kubeProxyMode: iptables
  podSubnet: $pod_subnet
  serviceSubnet: $service_subnet
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
nodes:
- role: control-plane
  image: $image
EOF
  # kind names the workers in this order (-worker, -worker2, ...): the DRA workers come last
  for _ in $(seq 1 "$((workers + dra_workers))"); do printf -- '- role: worker\n  image: %s\n' "$image"; done
} > "$dir/kind-config.yaml"

# The nodes' docker network, made here rather than by kind: IPv4 only (docker 20.10 switches host IPv6
# forwarding on for an IPv6 network, which the guard forbids), no masquerading, and a bridge name the
# guard's br-* rules match.
network="${ACCELPOLICY_KIND_NETWORK:-accelpolicy-kind}"
if ! docker network inspect "$network" >/dev/null 2>&1; then
  docker network create --driver bridge --subnet 172.18.200.0/24 \
    -o com.docker.network.bridge.name=br-accelkind -o com.docker.network.bridge.enable_ip_masquerade=false \
    "$network" >/dev/null
fi
[[ "$(docker network inspect -f '{{.EnableIPv6}}' "$network")" == false ]] \
  || { echo "kind-up.sh: docker network $network has IPv6 enabled; remove it (docker network rm $network)" >&2; exit 1; }
bash "$here/dockerd.sh" check >/dev/null || { bash "$here/dockerd.sh" check; exit 1; }

kubectl() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }
# Every node's kubelet, containerd and systemd hold inotify instances of this host's user; the kernel's
# default of 128 runs out with a second cluster or a busy host and a kubelet then never turns healthy
# (kind's "Pod errors due to too many open files"). Raised, never lowered.
for limit in fs.inotify.max_user_instances=8192 fs.inotify.max_user_watches=524288; do
  key="${limit%%=*}"; want="${limit#*=}"
  (( $(sysctl -n "$key") >= want )) || sysctl -q -w "$limit"
done
say "creating cluster '$name' (1 control-plane + $workers workers + $dra_workers DRA workers) from $image"
if ! PATH="$here/shim:$PATH" KIND_EXPERIMENTAL_PROVIDER=docker KIND_EXPERIMENTAL_DOCKER_NETWORK="$network" \
  "$kind_bin" create cluster --name "$name" --config "$dir/kind-config.yaml" --kubeconfig "$kubeconfig" --wait 0s \
  --retain; then
  # kept (--retain) long enough to say why: each node's last kubelet lines, then removed
  for node in $("$kind_bin" get nodes --name "$name" 2>/dev/null); do
    echo "kind-up.sh: $node: last kubelet log lines:" >&2
    docker exec "$node" journalctl -u kubelet -n 15 --no-pager >&2 2>&1 || true
  done
  "$kind_bin" delete cluster --name "$name" >/dev/null 2>&1 || true
  echo "kind-up.sh: kind create cluster '$name' failed (see above)" >&2
  exit 1
fi
say "kind create done"

# Cluster DNS answers cluster names only: zones cluster.local and the reverse zones; anything else REFUSED.
kubectl -n kube-system create configmap coredns --dry-run=client -o yaml --from-literal=Corefile="$(cat <<'EOF'
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        ttl 30
    }
    prometheus :9153
    cache 30
    reload
    loadbalance
}
EOF
)" | kubectl apply -f - >/dev/null
say "CoreDNS Corefile: cluster names only"

# Per-node bridge CNI for the node's podCIDR, and routes to every other node's podCIDR.
mapfile -t nodes < <("$kind_bin" get nodes --name "$name")
declare -A ip cidr
for n in "${nodes[@]}"; do
  ip[$n]="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$n")"
  for _ in $(seq 1 60); do
    cidr[$n]="$(kubectl get node "$n" -o jsonpath='{.spec.podCIDR}' 2>/dev/null || true)"
    [[ -n "${cidr[$n]}" ]] && break
    sleep 1
  done
  [[ -n "${cidr[$n]}" ]] || { echo "kind-up.sh: node $n got no podCIDR within 60s" >&2; exit 1; }
done
for n in "${nodes[@]}"; do
  docker exec -i "$n" sh -c 'cat > /etc/cni/net.d/10-accelpolicy-bridge.conflist' <<EOF
{
  "cniVersion": "1.0.0",
  "name": "accelpolicy-bridge",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "${cidr[$n]}"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  for m in "${nodes[@]}"; do
    [[ "$m" == "$n" ]] || docker exec "$n" ip route replace "${cidr[$m]}" via "${ip[$m]}"
  done
done
say "bridge CNI and podCIDR routes on ${#nodes[@]} nodes"

kubectl wait --for=condition=Ready nodes --all --timeout=300s >/dev/null
say "all ${#nodes[@]} nodes Ready"
kubectl -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null
say "CoreDNS available; cluster '$name' up"
echo "$kubeconfig"
