#!/usr/bin/env bash
# Installs Debian's chromium package, which the browser tests of `sqsworker
# ui` (cmd/sqsworker/internal/ui, chromedp) drive headless. `make test` runs
# it first.
#
# The version is pinned: CHROMIUM_VERSION below, the one the tests were last
# run with. Debian replaces a package's version in its archive when a
# security update comes out, and Chromium gets them often: when the pinned
# version is no longer served, the candidate version is installed instead,
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

cannot() {
	echo "install-chromium: $1; the browser tests of sqsworker ui will skip (install Debian's chromium package to run them)" >&2
	if [[ -n "${CI:-}" ]]; then
		exit 1
	fi
	exit 0
}

command -v apt-get >/dev/null 2>&1 || cannot "no apt-get on this machine"
sudo=""
if [[ "$(id -u)" != 0 ]]; then
	command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || cannot "not root, and no password-less sudo"
	sudo="sudo -n"
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-chromium: installing chromium $CHROMIUM_VERSION from Debian's packages" >&2
$sudo apt-get update -qq || cannot "apt-get update failed"
if ! $sudo apt-get install -y -qq --no-install-recommends "chromium=$CHROMIUM_VERSION" >/dev/null; then
	candidate="$(apt-cache policy chromium | awk '/Candidate:/ { print $2 }')"
	[[ -n "$candidate" && "$candidate" != "(none)" ]] || cannot "no chromium package in the configured Debian archives"
	echo "install-chromium: warning: chromium $CHROMIUM_VERSION is not served any more; installing $candidate (update CHROMIUM_VERSION in $0)" >&2
	$sudo apt-get install -y -qq --no-install-recommends "chromium=$candidate" >/dev/null || cannot "apt-get install chromium failed"
fi
chromium --version
