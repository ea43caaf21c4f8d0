#!/usr/bin/env bash
# Graphviz's dot draws the regions of `fxrewrite explain --html` (and its
# tests). Installs it from Debian's packages when it is missing and this runs
# as root; otherwise says how to.
set -euo pipefail
if ! command -v dot >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends graphviz
    else
        echo "Graphviz's dot not found; install it (apt-get install graphviz) for explain --html" >&2
    fi
fi
