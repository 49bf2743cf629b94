#!/usr/bin/env bash
# Delete the offline kind cluster made by kind-up.sh and its kubeconfig directory.
# Usage: e2e/kind/kind-down.sh [--name NAME]   (default $ACCELPOLICY_KIND_CLUSTER or accelpolicy)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
export ACCELPOLICY_CACHE="$cache"
name="${ACCELPOLICY_KIND_CLUSTER:-accelpolicy}"
if [[ "${1:-}" == --name ]]; then name="$2"; elif (($#)); then sed -n '2,3p' "$0" >&2; exit 2; fi
kind_bin="$(bash "$here/build-tools.sh" --print | awk '$1=="kind" {print $2}')"
dir="$cache/kind/clusters/$name"
if [[ -x "$kind_bin" ]]; then
  PATH="$here/shim:$PATH" "$kind_bin" delete cluster --name "$name" --kubeconfig "$dir/kubeconfig"
else
  ids="$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=$name")"
  [[ -z "$ids" ]] || docker rm -f $ids
fi
rm -rf "$dir"
echo "kind-down: cluster '$name' deleted"
