#!/usr/bin/env bash
# Regenerates the kubelet device-plugin v1beta1 gRPC stubs (api_pb2.py, api_pb2_grpc.py) in this directory.
#
# Source: pkg/apis/deviceplugin/v1beta1/api.proto of the Go module k8s.io/kubelet at the version matching
# the pinned Kubernetes (e2e/controlplane/go.mod), fetched through the Go module proxy with
# `go mod download`, committed here as api.proto. Stubs: grpcio-tools (`pip install -e '.[codegen]'`).
# Run from anywhere: `bash e2e/kind/kind_deviceplugin/regenerate.sh`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
k8s="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$root/e2e/controlplane/go.mod")"
VERSION="${KUBELET_MODULE_VERSION:-v0.${k8s#v1.}}"
PY="${PY:-$root/.venv/bin/python}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
moddir="$(cd "$tmp" && go mod download -json "k8s.io/kubelet@$VERSION" \
          | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
{
  echo "// Copied from k8s.io/kubelet@$VERSION pkg/apis/deviceplugin/v1beta1/api.proto by"
  echo "// e2e/kind/kind_deviceplugin/regenerate.sh. Do not edit; run that script."
  cat "$moddir/pkg/apis/deviceplugin/v1beta1/api.proto"
} > "$here/api.proto"
cd "$here/.."
"$PY" -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. kind_deviceplugin/api.proto
tools="$("$PY" -c 'from importlib.metadata import version; print(version("grpcio-tools"))')"
for f in api_pb2.py api_pb2_grpc.py; do
  { echo "# Generated from e2e/kind/kind_deviceplugin/api.proto (k8s.io/kubelet@$VERSION) by grpcio-tools $tools"
    echo "# via e2e/kind/kind_deviceplugin/regenerate.sh. Do not edit."
    cat "kind_deviceplugin/$f"; } > "$tmp/$f"
  mv "$tmp/$f" "kind_deviceplugin/$f"
done
echo "regenerated e2e/kind/kind_deviceplugin/api_pb2.py api_pb2_grpc.py from k8s.io/kubelet@$VERSION"
