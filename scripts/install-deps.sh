#!/usr/bin/env bash
# Installs the Debian packages elasticps needs when they are missing:
# libzmq (ZeroMQ van), a C/C++ toolchain (cgo, the bridge, the compat
# programs), the RDMA libraries (van/rdma, built with -tags rdma), and
# rsvg-convert (the PNG of the demo's plot).
set -euo pipefail
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in libzmq3-dev pkg-config g++ make libibverbs-dev librdmacm-dev libfabric-dev librsvg2-bin; do
  have "$p" || need+=("$p")
done
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "installing missing packages: ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${need[@]}"
