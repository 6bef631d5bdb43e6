package main

import (
	"context"
	"strings"
	"testing"

	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// batch show reads a batch kept in an idempotency table whose partition key
// is not the default "id" (idempotency.StoreConfig.KeyAttr, and
// batch.Config.KeyAttr, name it): the command has no such setting to give,
// so it takes the key from the table.
func TestBatchShowTableKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, table, coord := newBatchCoordinator(t, "pk")
	chunks := localtest.NewQueue(t, c, localtest.QueueOptions{})
	spec := batch.Spec{ID: "keyed", QueueURL: chunks.URL, Callback: batch.Callback{QueueURL: chunks.URL, Body: "assemble"},
		Chunks: []producer.Message{{Body: "a"}, {Body: "b"}}}
	if err := coord.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "", "batch", "show", "keyed", "--table", table)
	if code != 0 || !strings.Contains(stdout, "Chunks:         2, all sent") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// batch show --dlq given the dead-letter queue of another queue than the
// batch's chunks' queue says so, rather than report, falsely reassuring,
// that no chunk of the batch is dead-lettered.
func TestBatchShowOtherDLQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, table, coord := newBatchCoordinator(t, "")
	chunks := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	other := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	spec := batch.Spec{ID: "elsewhere", QueueURL: chunks.URL, Callback: batch.Callback{QueueURL: chunks.URL, Body: "assemble"},
		Chunks: []producer.Message{{Body: "a"}}}
	if err := coord.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "", "batch", "show", "elsewhere", "--table", table, "--dlq", other.DLQURL)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if want := "not the dead-letter queue of " + queueName(chunks.URL); !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	// The right one: no such warning.
	_, stderr, code = runCLI(t, "", "batch", "show", "elsewhere", "--table", table, "--dlq", chunks.DLQURL)
	if code != 0 || strings.Contains(stderr, "not the dead-letter queue") {
		t.Errorf("the chunks' own dead-letter queue: exit %d\n%s", code, stderr)
	}
}
