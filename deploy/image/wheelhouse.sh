#!/usr/bin/env bash
# Wheels of accelpolicy and its runtime dependencies for the image (no network inside the image build):
# `pip wheel` on the host into build/wheelhouse (ignored by git). The image's Python is Debian bookworm's
# 3.11, so the host interpreter that builds the wheels must be CPython 3.11 too (cp311 ABI).
#
# Usage: deploy/image/wheelhouse.sh [PYTHON]   (default .venv/bin/python)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py="${1:-$repo/.venv/bin/python}"
out="$repo/build/wheelhouse"
version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ "$version" != "3.11" ]]; then
  echo "wheelhouse: $py is Python $version; the image runs Debian bookworm's 3.11 (make a 3.11 venv)" >&2
  exit 2
fi
rm -rf "$out" && mkdir -p "$out"
# setuptools builds in the tree (build/lib, build/bdist.*) and reuses what it finds there: a module since
# removed from the sources would ride along. Start clean, and leave nothing behind for the next build.
clean() { rm -rf "$repo/build/lib" "$repo"/build/bdist.*; }
clean; trap clean EXIT
"$py" -m pip wheel --quiet --wheel-dir "$out" "$repo"
echo "wheelhouse: $(ls "$out" | wc -l) wheels in $out" >&2
