#!/usr/bin/env bash
# Debian's packages the tests run, installed if missing: prometheus (and its promtool: the deploy/ rules and a real
# scrape) and chromium (the status page in a headless browser). The tests start their own servers and browsers on
# loopback with configs of their own; nothing here runs one. Run as root (CI) or as a user who may run apt-get;
# idempotent.
set -euo pipefail
wanted=()
command -v promtool >/dev/null && command -v prometheus >/dev/null || wanted+=(prometheus)
command -v chromium >/dev/null || wanted+=(chromium)
if [ "${#wanted[@]}" -gt 0 ]; then
    install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${wanted[@]}" >/dev/null; }
    install || { apt-get update -q >/dev/null && install; }  # a machine whose package lists were never fetched
fi
promtool --version | head -1
chromium --version 2>/dev/null | tail -1
