#!/usr/bin/env bash
# A headless browser for the test that opens the HTML view of `fxrewrite
# explain --html` and checks its screenshot (tests/test_html.py). Installs
# Debian's Chromium when no browser is found and this runs as root; otherwise
# says how to (the test then skips, unless FXREWRITE_REQUIRE_BROWSER=1).
# Prints the browser's path when there is one. Nothing in the package needs it.
set -euo pipefail
find_browser() {
    command -v chromium || command -v chromium-browser || command -v google-chrome || true
}
if [ -z "$(find_browser)" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        # Retries: a mirror's passing hiccup must not turn a CI run red.
        apt-get -o Acquire::Retries=3 update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y -qq \
                --no-install-recommends chromium >/dev/null
    else
        echo "no headless browser found; install one (apt-get install chromium) for the HTML view's browser test" >&2
    fi
fi
find_browser
