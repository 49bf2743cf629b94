#!/usr/bin/env bash
# `make image`: the accelpolicy image, built offline.
#   1. the docker daemon must be the project's guarded one (e2e/kind/dockerd.sh check; started by
#      `e2e/kind/dockerd.sh start`, never otherwise);
#   2. the base: deploy/image/base.sh (or BASE=<image> for a registry base such as python:3.11-slim-bookworm);
#   3. the wheels: deploy/image/wheelhouse.sh (build/wheelhouse, rebuilt every time: cheap with pip's cache);
#   4. docker build --network none, tagged accelpolicy:<version> and accelpolicy:<version>-<content hash>.
# Prints the content-hash tag on its last line.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
guard="$repo/e2e/kind/dockerd.sh"
if [[ -f "$guard" ]]; then
  bash "$guard" check >/dev/null || { bash "$guard" check || true
    echo "image: refusing to build without the guarded docker daemon (run: bash e2e/kind/dockerd.sh start)" >&2; exit 1; }
else
  docker info >/dev/null 2>&1 || { echo "image: no docker daemon (and no e2e/kind/dockerd.sh to start a guarded one)" >&2; exit 1; }
fi
base="${BASE:-$(bash deploy/image/base.sh | tail -1)}"
bash deploy/image/wheelhouse.sh   # ~10 s with pip's cache warm; the accelpolicy wheel is always fresh
version="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("accelpolicy"))')"
# content hash: base, dependency wheels (names pin versions), the files our wheel holds, our sources,
# Dockerfile, rules
hash="$( (echo "$base"; ls build/wheelhouse | grep -v '^accelpolicy-'; cat deploy/image/Dockerfile pyproject.toml;
          .venv/bin/python -c 'import sys, zipfile; print(*sorted(zipfile.ZipFile(sys.argv[1]).namelist()))' \
            build/wheelhouse/accelpolicy-*.whl;
          find runtime probes rules -type f \( -name '*.py' -o -name '*.yaml' \) -not -path 'rules/tests/*' \
            | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -c1-12)"
name="${IMAGE_NAME:-accelpolicy}"
if docker image inspect "$name:$version-$hash" >/dev/null 2>&1; then
  echo "image: $name:$version-$hash present" >&2
else
  s=$(date +%s)
  docker build --network none --build-arg "BASE=$base" -f deploy/image/Dockerfile \
    -t "$name:$version-$hash" . >&2
  echo "image: built $name:$version-$hash in $(( $(date +%s) - s ))s" >&2
fi
docker tag "$name:$version-$hash" "$name:$version"
echo "image: $name:$version -> $name:$version-$hash ($(docker image inspect -f '{{.Size}}' "$name:$version" | awk '{printf "%.0f MB", $1/1e6}'))" >&2
echo "$name:$version-$hash"
