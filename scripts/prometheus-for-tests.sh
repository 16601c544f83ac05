#!/usr/bin/env bash
# The Prometheus the tests use: Debian's package (prometheus + promtool), installed if promtool is missing. The tests
# start their own server on a free loopback port with a config of their own; nothing here runs one.
# Run as root (CI) or as a user who may run apt-get; idempotent.
set -euo pipefail
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
    install || { apt-get update -q >/dev/null && install; }  # a machine whose package lists were never fetched
fi
promtool --version | head -1
