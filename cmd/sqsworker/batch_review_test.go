package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
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
	c := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	table := localtest.UniqueName(t, false)
	if err := idempotency.CreateTable(ctx, db, idempotency.StoreConfig{Table: table, KeyAttr: "pk"}); err != nil {
		t.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(t, db, table)
	chunks := localtest.NewQueue(t, c, localtest.QueueOptions{})
	coord, err := batch.New(ctx, db, c, batch.Config{Table: table, KeyAttr: "pk", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
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
