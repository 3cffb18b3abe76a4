#!/usr/bin/env bash
# Build the image's base without any container registry, and stage the CPU torch wheel, for
# machines that reach Debian's mirror and PyPI but neither Docker Hub nor the PyTorch index.
# Run as root, with a Docker engine running. Idempotent: run it again any time.
#
#   deploy/build-base-image.sh                 # aios-base:bookworm + deploy/wheels/torch-*.whl
#   docker build -f deploy/Dockerfile --build-arg BASE_IMAGE=aios-base:bookworm -t aios-rl:dev .
#   AIOS_BASE_IMAGE=aios-base:bookworm docker compose up --build
#
# The base is a Debian bookworm root file system (python3 is 3.11, like python:3.11-slim) made by
# mmdebstrap from Debian's mirror and loaded with `docker import`. The torch wheel comes from
# this machine's disk: TORCH_WHEEL=/path/to/torch-2.13.0+cpu-...whl, else the first one in pip's
# find-links directories or /opt/wheels. deploy/wheels/ is git-ignored except its README; the
# Dockerfile installs a torch wheel it finds there instead of going to the PyTorch index.
#
# The host's local CA certificates (/usr/local/share/ca-certificates/*.crt, e.g. a TLS-inspecting
# egress proxy's) are added to the base's trust store, and PIP_CERT points pip at it, so pip in
# the image build reaches PyPI the way the host's does.
#
# Environment: BASE_TAG (default aios-base:bookworm), SUITE (default bookworm),
# MIRROR (default http://deb.debian.org/debian), CA_DIR (default /usr/local/share/ca-certificates),
# TORCH_WHEEL, SKIP_WHEEL=1 (base image only), REBUILD=1 (make the base again).
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${BASE_TAG:-aios-base:bookworm}
suite=${SUITE:-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}
ca_dir=${CA_DIR:-/usr/local/share/ca-certificates}
torch_version=2.13.0

[ "$(id -u)" = 0 ] || { echo "build-base-image: run as root (mmdebstrap, docker)" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "build-base-image: no Docker engine answers (start dockerd)" >&2; exit 1; }

# --- the base image -----------------------------------------------------------------------
if docker image inspect "$tag" >/dev/null 2>&1 && [ "${REBUILD:-0}" != 1 ]; then
  echo "build-base-image: $tag exists (REBUILD=1 to make it again)"
else
  if ! command -v mmdebstrap >/dev/null; then
    echo "build-base-image: installing Debian's mmdebstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
  fi
  # minbase: essential packages + apt (so the Dockerfile's apt-get still works). python3-venv
  # brings pip (its ensurepip wheel) for the image's venv, passwd useradd, ca-certificates pip's
  # HTTPS, bubblewrap the shell sandbox; util-linux (setpriv, prlimit) is essential.
  # Documentation is left out, and mmdebstrap empties the apt lists and cache itself.
  packages=python3,python3-venv,ca-certificates,passwd,bubblewrap
  hooks=()
  if compgen -G "$ca_dir/*.crt" >/dev/null; then
    echo "build-base-image: adding the CA certificates in $ca_dir"
    hooks+=(--customize-hook="mkdir -p \"\$1/usr/local/share/ca-certificates\"")
    hooks+=(--customize-hook="cp $ca_dir/*.crt \"\$1/usr/local/share/ca-certificates/\"")
    hooks+=(--customize-hook='chroot "$1" update-ca-certificates >/dev/null')
  fi
  echo "build-base-image: mmdebstrap $suite ($packages) | docker import - $tag"
  mmdebstrap --variant=minbase --include="$packages" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      "${hooks[@]}" \
      "$suite" - "$mirror" \
    | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'CMD ["python3"]' \
        - "$tag"
fi
docker run --rm "$tag" python3 -c 'import sys, venv; assert sys.version_info[:2] == (3, 11), sys.version'
echo "build-base-image: $tag ready ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%d MB", $1/1e6}'))"

# --- the torch wheel ------------------------------------------------------------------------
[ "${SKIP_WHEEL:-0}" = 1 ] && exit 0
mkdir -p deploy/wheels
pattern="torch-${torch_version}+cpu-cp311-cp311-*linux*_x86_64.whl"
if compgen -G "deploy/wheels/$pattern" >/dev/null; then
  echo "build-base-image: $(ls deploy/wheels/$pattern) already staged"
  exit 0
fi
wheel=${TORCH_WHEEL:-}
if [ -z "$wheel" ]; then
  dirs=$(python3 -m pip config list 2>/dev/null | sed -n "s/.*find-links='\(.*\)'/\1/p" | tr ' ' '\n')
  for dir in $dirs /opt/wheels; do
    for candidate in "$dir"/$pattern; do
      [ -f "$candidate" ] && { wheel=$candidate; break 2; }
    done
  done
fi
if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
  echo "build-base-image: no local $pattern found (set TORCH_WHEEL=...);" \
       "the Dockerfile will use the PyTorch CPU index" >&2
  exit 0
fi
# A hard link when on the same file system (no second copy of ~190 MB), else a copy.
ln -f "$wheel" deploy/wheels/ 2>/dev/null || cp -f "$wheel" deploy/wheels/
echo "build-base-image: staged deploy/wheels/$(basename "$wheel")"
