#!/usr/bin/env bash
# Installs headless Chromium (Debian's chromium package) for the tests that load the status pages
# in a browser, and prints its path. A second run finds it and takes no time.
#
# Usage: hack/chromium.sh   install if missing, print the path of the chromium binary
set -euo pipefail
for c in chromium chromium-browser; do
  if p=$(command -v "$c"); then echo "$p"; exit 0; fi
done
echo "chromium: installing chromium (apt-get)" >&2
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
command -v chromium
