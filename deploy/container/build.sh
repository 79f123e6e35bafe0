#!/usr/bin/env bash
# Build the sandbox-kernel image: the wheel from this checkout, then deploy/container/Containerfile with a context
# that holds only that wheel and constraints.txt (the tested versions of its dependencies).
# Usage: deploy/container/build.sh [ENGINE BUILD OPTIONS...]
#   ENGINE=podman (default) or docker; TAG=sandbox-kernel:<version> (default); BASE=<image> overrides the base image.
# Example: BASE=localhost/debian-python:bookworm deploy/container/build.sh --network=host
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
engine=${ENGINE:-podman}
python=${PYTHON:-python3}
version=$("$python" -c 'import re, sys; print(re.search(r"__version__ = \"(.+?)\"", open(sys.argv[1]).read())[1])' \
  "$repo/kernel/sandbox_kernel/__init__.py")
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$context" "$repo"
cp "$here/constraints.txt" "$context/"
base=()
if [[ -n ${BASE:-} ]]; then base=(--build-arg "BASE=$BASE"); fi
# Not exec: the EXIT trap above removes the context once the engine is done.
"$engine" build --file "$here/Containerfile" --build-arg "VERSION=$version" "${base[@]}" \
  --tag "${TAG:-sandbox-kernel:$version}" "$@" "$context"
