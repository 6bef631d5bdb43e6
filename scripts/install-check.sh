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
trap 'rm -rf "$work"' EXIT
go run ./internal/cmd/modproxy -version "$version" -out "$work/proxy" >/dev/null
export GOWORK=off GOFLAGS=-mod=mod GOSUMDB=off GONOSUMDB=github.com/sqsworker GOTOOLCHAIN=local \
	GOPROXY="file://$work/proxy,file://$(go env GOMODCACHE)/cache/download"
GOBIN="$work/bin" go install "github.com/sqsworker/sqsworker/cmd/sqsworker@$version"
"$work/bin/sqsworker" --version
mkdir "$work/user" && cd "$work/user"
cat > main.go <<'GO'
package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sqsworker/sqsworker/metrics/prometheus"
	"github.com/sqsworker/sqsworker/otel"
	"github.com/sqsworker/sqsworker/worker"
)

func main() {
	_ = worker.Config{QueueURL: "q"}
	_ = sqsotel.Middleware
	_ = sqsprom.NewRecorder
	_ = prometheus.NewRegistry
	fmt.Println("imports build")
}
GO
go mod init example.com/user >/dev/null 2>&1
go get "github.com/sqsworker/sqsworker@$version" "github.com/sqsworker/sqsworker/otel@$version" \
	"github.com/sqsworker/sqsworker/metrics/prometheus@$version" >/dev/null
go mod tidy >/dev/null
go run .
echo "install-check: every module installs and imports as $version"
