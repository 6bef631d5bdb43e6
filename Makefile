# sqsworker — build, test and demo against a local AWS stack.
#
#   make demo    install what is missing, start the local stack, run the demo
#   make test    every test, against the local stack (started if needed)
#   make bench   throughput and request-cost benchmarks against the local stack
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

.PHONY: all deps stack-start stack-stop stack-status demo test test-unit bench lint fmt vet clean

all: lint test

## deps: install the local stack's pinned packages and the Go modules
deps:
	$(STACK) install
	$(GO) mod download

## stack-start / stack-stop / stack-status: manage the local AWS stack
stack-start: deps
	$(STACK) start sqs dynamodb

stack-stop:
	$(STACK) stop

stack-status:
	$(STACK) status

## demo: a worker processing jobs with retries, a DLQ and a replay
demo: stack-start
	$(WITH_STACK) $(GO) run ./cmd/sqsworker-demo

## test: every test, with the race detector, against the local stack
test: stack-start vet
	$(WITH_STACK) CI=$${CI:-} $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

## test-unit: the tests that need no local stack (the others skip)
test-unit:
	env -u AWS_ENDPOINT_URL -u AWS_ENDPOINT_URL_SQS -u AWS_ENDPOINT_URL_DYNAMODB $(GO) test -count=1 ./...

## bench: worker throughput against a raw SDK loop, and request cost per message
bench: stack-start
	$(WITH_STACK) $(GO) run ./internal/cmd/sqsbench
	$(WITH_STACK) $(GO) test -run '^$$' -bench . -benchmem ./...

## lint: formatting and vet
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean: stack-stop
	rm -rf localstack/node_modules localstack/.run bin
