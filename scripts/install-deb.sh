#!/usr/bin/env bash
# Installs one of Debian's packages at a pinned version, for a tool the
# project's own targets run: install-deb.sh PACKAGE VERSION COMMAND PURPOSE.
# Nothing is done when COMMAND is already on the PATH.
#
# Debian replaces a package's version in its archive when a security update
# comes out: when the pinned version is no longer served, the candidate
# version is installed instead, with a warning saying which (bump the pin to
# it). Where the package cannot be installed (no apt-get, not root and no
# password-less sudo), the script says so and exits 1 when CI is set or
# REQUIRED is, else 0: the caller decides what goes without the tool.
set -euo pipefail

if [[ $# -ne 4 ]]; then
	echo "usage: $0 PACKAGE VERSION COMMAND PURPOSE" >&2
	exit 2
fi
package="$1" version="$2" command="$3" purpose="$4"

if command -v "$command" >/dev/null 2>&1; then
	exit 0
fi

cannot() {
	echo "install-deb: $1; $purpose (install Debian's $package package)" >&2
	if [[ -n "${CI:-}" || -n "${REQUIRED:-}" ]]; then
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
echo "install-deb: installing $package $version from Debian's packages" >&2
$sudo apt-get update -qq || cannot "apt-get update failed"
if ! $sudo apt-get install -y -qq --no-install-recommends "$package=$version" >/dev/null; then
	candidate="$(apt-cache policy "$package" | awk '/Candidate:/ { print $2 }')"
	[[ -n "$candidate" && "$candidate" != "(none)" ]] || cannot "no $package package in the configured Debian archives"
	echo "install-deb: warning: $package $version is not served any more; installing $candidate (update the pin)" >&2
	$sudo apt-get install -y -qq --no-install-recommends "$package=$candidate" >/dev/null || cannot "apt-get install $package failed"
fi
