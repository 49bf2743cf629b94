#!/usr/bin/env bash
# Regenerates the kubelet PodResources v1 gRPC stubs (api_pb2.py, api_pb2_grpc.py) in this directory.
#
# Source: pkg/apis/podresources/v1/api.proto of the Go module k8s.io/kubelet (version below), fetched
# through the Go module proxy with `go mod download`; gogo-protobuf imports and options (present in
# older releases) are stripped; the result is committed here as api.proto. Stubs: grpcio-tools
# (`pip install -e '.[codegen]'`). Run from anywhere: `make podresources-stubs`.
set -euo pipefail
VERSION="${KUBELET_MODULE_VERSION:-v0.37.2}"
root="$(cd "$(dirname "$0")/../../.." && pwd)"
PY="${PY:-$root/.venv/bin/python}"
rel=runtime/kube/podresources
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
moddir="$(cd "$tmp" && go mod download -json "k8s.io/kubelet@$VERSION" \
          | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
src="$moddir/pkg/apis/podresources/v1/api.proto"
{
  echo "// Copied from k8s.io/kubelet@$VERSION pkg/apis/podresources/v1/api.proto by $rel/regenerate.sh"
  echo "// (gogo-protobuf imports and options stripped). Do not edit; run \`make podresources-stubs\`."
  grep -v 'gogoproto/gogo.proto' "$src" | grep -v '^option (gogoproto' | sed -E 's/ *\[\(gogoproto[^]]*\]//g'
} > "$root/$rel/api.proto"
cd "$root"
"$PY" -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. "$rel/api.proto"
tools="$("$PY" -c 'from importlib.metadata import version; print(version("grpcio-tools"))')"
for f in api_pb2.py api_pb2_grpc.py; do
  { echo "# Generated from $rel/api.proto (k8s.io/kubelet@$VERSION) by grpcio-tools $tools via"
    echo "# \`make podresources-stubs\` ($rel/regenerate.sh). Do not edit."
    cat "$rel/$f"; } > "$tmp/$f"
  mv "$tmp/$f" "$rel/$f"
done
echo "regenerated $rel/api_pb2.py $rel/api_pb2_grpc.py from k8s.io/kubelet@$VERSION"
