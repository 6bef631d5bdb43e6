# sqsworker — build, test and demo against a local AWS stack.
#
#   make demo    install what is missing, start the local stack, run the demo
#   make test    every test, against the local stack (started if needed)
#   make bench   throughput and request-cost benchmarks against the local stack
#   make bench-instructions
#                each consumer's instructions per message (valgrind's
#                cachegrind): a CPU figure that other work does not move
#   make tools   install the pinned test tools (the Lambda emulator) in bin/tools
#   make lint    gofmt, go vet, and staticcheck (pinned, installed in bin/tools
#                when missing) over every module, infra/ included
#   make lambda  build the example Lambda function for provided.al2023
#
# The stack (localstack/stack.sh) runs fauxqs for SQS and DynamoDB Local (on
# the machine's Java 17) on 127.0.0.1; clients find it through the SDK's standard AWS_ENDPOINT_URL_*
# variables, which `localstack/stack.sh env` prints.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
STACK := localstack/stack.sh
WITH_STACK := eval "$$($(STACK) env)" &&
GO ?= go
TEST_TIMEOUT ?= 15m
# How many tests of one package run at once (go test -parallel; its default
# is the number of cores). The emulator tests spend their time waiting on
# SQS's clocks (visibility timeouts, long polls, message delays), not on the
# cores, so `make test` runs more of them at once than a 2-core machine has
# cores: the worker package's tests take 197 s at 8 rather than 692 s at 2.
TEST_PARALLEL ?= 8
# The AWS Lambda Runtime Interface Emulator, which the Lambda tests run
# function bootstraps under (sqstest/localtest/rie.go). Bumping the version
# needs `rm bin/tools/aws-lambda-rie` (or `make clean`) to take effect.
RIE_MODULE := github.com/aws/aws-lambda-runtime-interface-emulator
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
RIE := bin/tools/aws-lambda-rie
# staticcheck, which `make lint` runs and installs in bin/tools when missing:
# v0.8.2 is staticcheck 2026.2.2, the newest release (`go list -m -versions
# honnef.co/go/tools`), and its go.mod asks for Go 1.26, the workspace's.
# Bumping it, likewise, needs `rm bin/tools/staticcheck`. Its checks are its
# defaults (no staticcheck.conf); a finding that is kept says why in a
# //lint:ignore beside it.
STATICCHECK_MODULE := honnef.co/go/tools
STATICCHECK_VERSION := v0.8.2
STATICCHECK := bin/tools/staticcheck
# The example function, built as the bootstrap a provided.al2023 Lambda runs.
LAMBDA_PKG := ./cmd/example-lambda
LAMBDA_ARCHS := amd64 arm64
# Every module of the workspace (go.work): the library, the CLI, and the
# Prometheus and OpenTelemetry modules.
PKGS := ./... ./cmd/sqsworker/... ./metrics/sqsprom/... ./sqsotel/...
# The packages `make test` tests, the worker's first: go test starts the
# packages' tests in the order it is given them, as many packages at once
# as the machine has cores, and the worker's tests take longest (about
# 190 s at TEST_PARALLEL 8). Late in ./...'s order, they started when the
# rest was nearly done, and ran on alone at the end.
TEST_PKGS := ./worker $(PKGS)

.PHONY: all deps tools lambda stack-start stack-stop stack-status demo test test-unit bench bench-instructions valgrind chaos install-check chromium lint fmt vet clean FORCE

all: lint test

## deps: install the local stack's pinned packages and the Go modules
deps:
	$(STACK) install
	$(GO) mod download
	cd infra && GOWORK=off $(GO) mod download

## tools: the pinned test tools, in bin/tools (installed only when missing);
## lint installs its own, staticcheck, there too
tools: $(RIE)

$(RIE):
	GOBIN=$(CURDIR)/bin/tools $(GO) install $(RIE_MODULE)/cmd/aws-lambda-rie@$(RIE_VERSION)

$(STATICCHECK):
	GOBIN=$(CURDIR)/bin/tools $(GO) install $(STATICCHECK_MODULE)/cmd/staticcheck@$(STATICCHECK_VERSION)

## lambda: the example function as bin/lambda/{amd64,arm64}/bootstrap, for provided.al2023
lambda: $(foreach a,$(LAMBDA_ARCHS),bin/lambda/$(a)/bootstrap)

# Always handed to go build, whose cache decides what to rebuild.
bin/lambda/%/bootstrap: FORCE
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $@ $(LAMBDA_PKG)

FORCE:

## stack-start / stack-stop / stack-status: manage the local AWS stack
stack-start: deps
	$(STACK) start sqs dynamodb

stack-stop:
	$(STACK) stop

stack-status:
	$(STACK) status

## demo: a worker processing jobs with retries, a DLQ and a replay
demo: stack-start
	@$(WITH_STACK) q=demo-jobs-$$(date +%H%M%S) && \
	$(GO) run ./cmd/sqsworker-demo -queue-prefix $$q -cli-replay && \
	printf '\n$$ sqsworker dlq ls %s\n' $$q-dlq && \
	$(GO) run ./cmd/sqsworker dlq ls $$q-dlq && \
	printf '\n$$ sqsworker dlq replay %s --error-class endpoint-unavailable --yes --audit -\n' $$q-dlq && \
	$(GO) run ./cmd/sqsworker dlq replay $$q-dlq --error-class endpoint-unavailable --yes --audit - && \
	printf '\n' && \
	$(GO) run ./cmd/sqsworker-demo -queue-prefix $$q -drain

## test: every test, with the race detector, against the local stack
test: stack-start vet tools chromium infra-test
	$(WITH_STACK) CI=$${CI:-} $(GO) test -race -count=1 -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(TEST_PKGS)
	$(MAKE) --no-print-directory install-check

## chromium: Debian's chromium package (pinned) for the browser tests of
## sqsworker ui, where apt-get can install it (scripts/install-chromium.sh)
chromium:
	scripts/install-chromium.sh

## install-check: every module installs and imports as published, offline:
## the modules as release files in a file-based module proxy, then
## `go install …/cmd/sqsworker@VERSION` and a program importing the worker,
## sqsotel and sqsprom, outside the workspace (scripts/install-check.sh)
install-check:
	scripts/install-check.sh

## test-unit: the tests that need no local stack (the others skip)
test-unit:
	env -u AWS_ENDPOINT_URL -u AWS_ENDPOINT_URL_SQS -u AWS_ENDPOINT_URL_DYNAMODB $(GO) test -count=1 $(PKGS)

## chaos: the full chaos run against the local stack behind fault proxies:
## kill -9 of the worker (10,000 jobs, 10 kills), SQS refused and
## blackholed, DynamoDB refused and blackholed, SIGTERM with jobs in flight,
## poison jobs; a table of duplicates, lost and dead-lettered jobs per
## scenario. `make test` runs the short version (TestChaosShort).
chaos: stack-start
	$(WITH_STACK) $(GO) run ./internal/cmd/chaos -full

## bench: what users see, against the local stack (internal/cmd/sqsbench): the
## worker (heartbeat on and off) and a raw SDK loop, each a process of its own
## timed from exec to exit at 20,000 and 60,000 messages, 3 interleaved
## repetitions: throughput, CPU per 10k messages, peak RSS, SQS requests per
## message, shutdown tail; then 1,000 slow jobs in flight with the worker's RSS
## sampled for two minutes; then priority queues: a critical queue's latency
## under a flood of 10,000 low jobs (MultiWorker, Workers split by hand, one
## shared queue) and the idle cost, about 3 minutes; then the comparison
## again at 60,000 messages with every answer held 20 ms, as a round trip to
## SQS in a region takes (sqsbench -latency); then the Go benchmarks. Tables
## on stdout, progress on stderr. Before the latency comparison, 9 to 11
## minutes (BENCHMARKS.md).
bench: stack-start tools
	$(WITH_STACK) $(GO) run ./internal/cmd/sqsbench -go $(GO)
	$(WITH_STACK) $(GO) run ./internal/cmd/sqsbench -go $(GO) -messages 60000 -soak=false -priority=false -raw-attributes -latency 20ms
	$(WITH_STACK) $(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## bench-instructions: the instructions each consumer of the comparison
## executes per message, counted by valgrind's cachegrind (sqsbench
## -instructions, internal/cmd/sqsbench/instructions.go): 5,000 messages, 3
## repetitions, about 3 minutes. CPU seconds on a shared machine spread by more
## than the differences between the consumers; instruction counts repeat
## within 1 to 3%.
bench-instructions: stack-start valgrind
	$(WITH_STACK) $(GO) run ./internal/cmd/sqsbench -go $(GO) -perf=false -soak=false -priority=false -instructions

## valgrind: Debian's valgrind package (pinned), for bench-instructions
VALGRIND_VERSION ?= 1:3.19.0-1
valgrind:
	REQUIRED=1 scripts/install-deb.sh valgrind $(VALGRIND_VERSION) valgrind "make bench-instructions cannot run"

## lint: formatting, vet, and staticcheck over the workspace's modules and infra/
# infra/ is analysed as a module of its own (GOWORK=off, as infra-test runs
# it); type-checking it needs neither Node nor the CDK CLI, only its Go
# modules, which `make test` downloads as well. On a fresh machine (empty
# module, build and staticcheck caches) lint takes about 4.5 minutes: go vet
# 2.5, installing staticcheck 0.75, staticcheck 0.7 over the workspace and 1.7
# over infra/ (0.2 of it downloading the CDK's modules); with warm caches,
# seconds. infra/ stays in lint, since even cold it adds under 2 minutes.
lint: vet $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@out=$$(git grep -n 'synctest\.Test(' -- '*.go' ':!internal/bubble/' || true); if [ -n "$$out" ]; then echo "call bubble.Test (internal/bubble), not synctest.Test: under -race it crashes the test binary:"; echo "$$out"; exit 1; fi
	rc=0; $(STATICCHECK) $(PKGS) || rc=1; \
	(cd infra && GOWORK=off ../$(STATICCHECK) ./...) || rc=1; \
	(cd infra/examplehandler && GOWORK=off ../../$(STATICCHECK) ./...) || rc=1; exit $$rc

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean: stack-stop
	rm -rf localstack/node_modules localstack/.run bin

## synth: the example CDK app (infra/, a module of its own) as CloudFormation in
## infra/cdk.out, offline: no AWS credentials, no Docker. Node 24 from the
## local stack runs jsii and the CDK CLI pinned in infra/_cdk.
# GOWORK=off: infra is not in go.work, so that the library's users never
# download the CDK. AWS_EC2_METADATA_DISABLED keeps the CLI off the instance
# metadata service when it looks for a default account.
INFRA_ENV := cd infra && export PATH="$$(dirname "$$(../$(STACK) node)"):$$PATH" GOWORK=off \
	AWS_EC2_METADATA_DISABLED=true CDK_DISABLE_CLI_TELEMETRY=true &&
CDK := infra/_cdk/node_modules/.bin/cdk

.PHONY: synth infra-test infra-app

# infra-app: compiles the example CDK app into Go's build cache, for synth.
infra-app:
	$(INFRA_ENV) $(GO) build -o /dev/null ./cmd/app

# The example function and the CDK app compile at once (the first synth
# spends most of its time compiling both), then cdk synth runs the app.
synth: $(CDK)
	$(MAKE) --no-print-directory -j2 bin/lambda/arm64/bootstrap infra-app
	$(INFRA_ENV) _cdk/node_modules/.bin/cdk synth --no-notices --no-version-reporting -q
	@echo "template: infra/cdk.out/SqsWorkerExample.template.json"

$(CDK): infra/_cdk/package.json infra/_cdk/package-lock.json
	$(STACK) install
	cd infra/_cdk && PATH="$$(dirname "$$(../../$(STACK) node)"):$$PATH" npm ci --no-audit --no-fund
	touch $@

## infra-test: the CDK constructs' assertions, cdk-nag checks and golden template
## (`cd infra && GOWORK=off go test ./exampleapp -update` rewrites the golden file)
infra-test:
	$(STACK) install
	$(INFRA_ENV) $(GO) vet ./... && $(GO) test -count=1 ./...
