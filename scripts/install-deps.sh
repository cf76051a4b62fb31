#!/usr/bin/env bash
# Installs the Debian packages elasticps needs when they are missing.
set -euo pipefail
need=()
pkg-config --exists libzmq 2>/dev/null || need+=(libzmq3-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "installing missing packages: ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${need[@]}"
