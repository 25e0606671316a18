#!/bin/sh
# Install the Debian packages dmkv needs to build, test and benchmark (only missing ones).
set -e
PKGS="build-essential cmake pkg-config libuv1-dev libhiredis-dev libxxhash-dev \
libboost-context-dev libibverbs-dev librdmacm-dev redis-server redis-tools bc python3-redis \
qemu-system-x86 docker-compose faketime gnuplot-nox clang libclang-rt-14-dev tcl \
prometheus-redis-exporter valgrind"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
