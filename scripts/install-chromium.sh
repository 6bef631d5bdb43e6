#!/usr/bin/env bash
# Installs Debian's chromium package, which the browser tests of `sqsworker
# ui` (cmd/sqsworker/internal/ui, chromedp) drive headless. `make test` runs
# it first.
#
# The version is pinned: CHROMIUM_VERSION below, the one the tests were last
# run with. Chromium gets security updates often: when the pinned version is
# no longer served, install-deb.sh installs the candidate version instead,
# with a warning saying which (bump the pin to it).
#
# Where the browser tests already find a browser (chromium, chromium-browser
# or google-chrome on the PATH, or $SQSWORKER_CHROMIUM), nothing is done.
# Where chromium cannot be installed (no apt-get, not root), the script says
# so and exits 0 unless CI is set: the browser tests then skip with a
# message outside CI, and fail in CI.
set -euo pipefail

CHROMIUM_VERSION="${CHROMIUM_VERSION:-156.0.8078.114-1~deb12u1}"

if [[ -n "${SQSWORKER_CHROMIUM:-}" ]]; then
	exit 0
fi
for browser in chromium chromium-browser google-chrome; do
	if command -v "$browser" >/dev/null 2>&1; then
		exit 0
	fi
done
"$(dirname "$0")/install-deb.sh" chromium "$CHROMIUM_VERSION" chromium \
	"the browser tests of sqsworker ui will skip"
if command -v chromium >/dev/null 2>&1; then
	chromium --version
elif [[ -n "${CI:-}" ]]; then
	echo "install-chromium: chromium was installed but is not on the PATH" >&2
	exit 1
fi
