#!/usr/bin/env bash
# Proves every module installable and importable as published, offline: the
# repository's modules are written as release VERSION into a file-based
# module proxy (internal/cmd/modproxy), with the module cache's download
# directory behind it for the dependencies; then, outside the workspace,
# `go install …/cmd/sqsworker@VERSION` and a small program that imports the
# worker, the OpenTelemetry and the Prometheus modules must build.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-$(awk '$1 == "github.com/sqsworker/sqsworker" { print $2 }' cmd/sqsworker/go.mod)}"
[[ "$version" == v* ]] || { echo "install-check: no version of the root module required by cmd/sqsworker/go.mod" >&2; exit 1; }
work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
go run ./internal/cmd/modproxy -version "$version" -out "$work/proxy" >/dev/null
# A module cache of its own, so that nothing of an earlier check is reused;
# the dependencies come from the machine's module cache, served as a proxy.
export GOPROXY="file://$work/proxy,file://$(go env GOMODCACHE)/cache/download" \
	GOMODCACHE="$work/modcache" GOWORK=off GOFLAGS=-mod=mod GOSUMDB=off GOTOOLCHAIN=local
GOBIN="$work/bin" go install "github.com/sqsworker/sqsworker/cmd/sqsworker@$version"
"$work/bin/sqsworker" --version
mkdir "$work/user" && cd "$work/user"
cat > main.go <<'GO'
package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sqsworker/sqsworker/metrics/sqsprom"
	"github.com/sqsworker/sqsworker/sqsotel"
	"github.com/sqsworker/sqsworker/worker"
)

func main() {
	reg := prometheus.NewRegistry()
	rec := sqsprom.New(reg, sqsprom.Options{})
	_ = worker.Config{QueueURL: "q", Metrics: rec}
	_ = sqsotel.Middleware()
	fmt.Println("imports build")
}
GO
go mod init example.com/user >/dev/null 2>&1
go get "github.com/sqsworker/sqsworker@$version" "github.com/sqsworker/sqsworker/sqsotel@$version" \
	"github.com/sqsworker/sqsworker/metrics/sqsprom@$version" >/dev/null
go mod tidy >/dev/null
go run .
echo "install-check: every module installs and imports as $version"
