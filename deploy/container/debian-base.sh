#!/usr/bin/env bash
# Make a base image for build.sh from Debian's archive alone (no Docker Hub): a minimal Debian with its python3, venv
# module and CA certificates, made by mmdebstrap and imported into the engine.
# Usage: deploy/container/debian-base.sh SUITE [TAG]
#   SUITE: bookworm (Python 3.11) or trixie (Python 3.13); TAG: localhost/debian-python:SUITE (default).
#   ENGINE=podman (default) or docker; MIRROR=http://deb.debian.org/debian (default).
# Then: BASE=localhost/debian-python:SUITE deploy/container/build.sh   (docs/container.md)
# As root, or as a user with subordinate ids (/etc/subuid): mmdebstrap then builds in a user namespace.
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 SUITE [TAG]   (SUITE: bookworm or trixie)" >&2
  exit 2
fi
suite=$1
tag=${2:-localhost/debian-python:$suite}
engine=${ENGINE:-podman}
for program in mmdebstrap "$engine"; do
  if ! command -v "$program" >/dev/null; then
    echo "$0: $program is not installed (Debian: apt-get install mmdebstrap podman)" >&2
    exit 1
  fi
done
tarball=$(mktemp --suffix=.tar)
trap 'rm -f "$tarball"' EXIT
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
  "$suite" "$tarball" "${MIRROR:-http://deb.debian.org/debian}"
"$engine" import --change 'CMD ["python3"]' "$tarball" "$tag" >/dev/null
echo "$tag"
