#!/usr/bin/env bash
# Install headless Chromium and its WebDriver from Debian's packages when missing (the HTML report's browser test).
# CI runs as root; elsewhere run it with sudo. No browser download outside the package manager.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "[msdoctor] chromium is missing: run 'sudo apt-get install -y chromium chromium-driver'" >&2
  exit 1
fi
echo "[msdoctor] installing chromium and chromium-driver (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
