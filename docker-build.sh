#!/usr/bin/env bash
# Builds the `ipybox` image with a container user that has your UID and GID, so files ipybox
# writes to the mounted workspace stay yours. Usage: ./docker-build.sh [extra docker build args]
set -euo pipefail
cd "$(dirname "$0")"
exec docker build \
  --build-arg UID="$(id -u)" \
  --build-arg GID="$(id -g)" \
  --tag ipybox \
  "$@" .
