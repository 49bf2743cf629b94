#!/usr/bin/env bash
# Lift the node's Service CIDR blackhole once kube-proxy has programmed Services (its KUBE-SERVICES chain
# holds the rule for default/kubernetes). Records both moments in /kind/accelpolicy/service-blackhole.log.
set -o errexit -o nounset -o pipefail
cidr="${ACCELPOLICY_SERVICE_CIDR:-10.96.0.0/12}"
# (output captured first: with pipefail, `iptables | grep -q` can fail by SIGPIPE once grep has matched)
until grep -q 'default/kubernetes:https cluster IP' <<<"$(iptables -w -t nat -S KUBE-SERVICES 2>/dev/null || true)"; do
  sleep 1
done
echo "kube-proxy $(date +%s.%N) KUBE-SERVICES programmed" >> /kind/accelpolicy/service-blackhole.log
ip route del blackhole "$cidr"
echo "removed $(date +%s.%N) $cidr" >> /kind/accelpolicy/service-blackhole.log
