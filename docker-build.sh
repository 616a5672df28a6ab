#!/usr/bin/env bash
# Builds the `ipybox` image with a container user that has your UID and GID, so files ipybox
# writes to the mounted workspace stay yours (also as root). Extra arguments go to `docker build`,
# e.g. ./docker-build.sh --build-arg BASE_IMAGE=my-registry/python:3.11-slim-bookworm
set -euo pipefail
cd "$(dirname "$0")"
exec "${IPYBOX_CONTAINER_ENGINE:-docker}" build \
  --build-arg UID="$(id -u)" \
  --build-arg GID="$(id -g)" \
  --tag "${IPYBOX_IMAGE:-ipybox}" \
  "$@" .
