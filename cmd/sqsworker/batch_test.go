package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// batch show prints a batch's counts, its failed chunk with its error, and
// with --dlq the chunk SQS dead-lettered, with its dead-letter reason.
func TestBatchShow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, table, coord := newBatchCoordinator(t, "")
	chunks, callbacks := createBatch(t, c, coord, "report-7", "ok", "broken", "dead", "waiting")
	h := coord.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "broken":
			return sqsworker.Permanent(errors.New("row 17: invalid date"))
		case "dead":
			return errors.New("upstream timeout")
		}
		return nil
	}))
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &chunks.URL, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range out.Messages {
		m := &sqsworker.Message{ID: aws.ToString(raw.MessageId), Body: aws.ToString(raw.Body), ReceiveCount: 1,
			MessageAttributes: map[string]sqsworker.MessageAttribute{}}
		for k, v := range raw.MessageAttributes {
			m.MessageAttributes[k] = sqsworker.MessageAttribute{DataType: aws.ToString(v.DataType), StringValue: aws.ToString(v.StringValue)}
		}
		if m.Body == "waiting" {
			continue
		}
		_ = h.HandleMessage(ctx, m)
		if m.Body == "dead" {
			// The runtime dead-letters it with its failure metadata, as
			// after its last receive.
			f := sqsworker.Failure{Error: "upstream timeout", ErrorClass: "timeout", Attempts: 3, FailedAt: time.Now(),
				SourceQueue: chunks.URL, MessageID: m.ID}
			sendDeadLettered(t, c, chunks.DLQURL, m.Body, f, m.MessageAttributes)
		}
	}

	stdout, stderr, code := runCLI(t, "", "batch", "show", "report-7", "--table", table, "--dlq", queueName(chunks.DLQURL))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	t.Logf("\n%s", stdout)
	for _, want := range []string{
		"Batch:          report-7", "Chunks:         4, all sent", "Done:           1", "Failed:         1", "Pending:        2",
		"Completed:      no; the completion job goes to " + queueName(callbacks.URL),
		"FAILED CHUNK  ATTEMPTS  ERROR CLASS", "1             1         ", "row 17: invalid date",
		"DEAD-LETTERED CHUNK", "upstream timeout", "timeout",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(stdout, "broken") || strings.Contains(stdout, "waiting") {
		t.Errorf("output shows a message body:\n%s", stdout)
	}

	stdout, stderr, code = runCLI(t, "", "-o", "json", "batch", "show", "report-7", "--table", table, "--dlq", chunks.DLQURL)
	if code != 0 {
		t.Fatalf("-o json: exit %d: %s", code, stderr)
	}
	var got struct {
		Total, Done, Failed, Pending int
		FailedChunks                 []struct{ Index int }
		DeadLetters                  []struct {
			Index      int
			ErrorClass string
		}
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if got.Total != 4 || got.Done != 1 || got.Failed != 1 || got.Pending != 2 || len(got.FailedChunks) != 1 || got.FailedChunks[0].Index != 1 ||
		len(got.DeadLetters) != 1 || got.DeadLetters[0].Index != 2 || got.DeadLetters[0].ErrorClass != "timeout" {
		t.Errorf("json: %+v", got)
	}
}

// batch show's errors name the fix.
func TestBatchShowErrors(t *testing.T) {
	t.Parallel()
	table := batchTable(t, localtest.NewDynamoDB(t), "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"batch", "show", "b1"}, 2, "--table is required"},
		{[]string{"batch", "show", "a#b", "--table", table}, 2, "not #"},
		{[]string{"batch", "show"}, 2, "one BATCH_ID"},
		{[]string{"batch", "show", "never-created", "--table", table}, 1, `no batch "never-created" in table ` + table + ": check the ID, and that the table is the one"},
		{[]string{"batch", "show", "b1", "--table", table + "-missing"}, 1, "-missing does not exist in region "},
		{[]string{"batch", "show", "b1", "--table", table + "-missing"}, 1, "pass --table the idempotency table the batch was created in"},
		{[]string{"batch", "shw"}, 2, "did you mean show"},
	} {
		_, stderr, code := runCLI(t, "", tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// batchTable creates an idempotency table of the test's own in DynamoDB
// Local, its partition key keyAttr ("" for the default), deleted when the
// test ends.
func batchTable(t *testing.T, db *dynamodb.Client, keyAttr string) string {
	t.Helper()
	table := localtest.UniqueName(t, false)
	if err := idempotency.CreateTable(context.Background(), db, idempotency.StoreConfig{Table: table, KeyAttr: keyAttr}); err != nil {
		t.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(t, db, table)
	return table
}

// newBatchCoordinator returns a local SQS client, a DynamoDB Local client, a
// table of the test's own (batchTable, its key keyAttr) and a batch
// coordinator on them, its logs discarded.
func newBatchCoordinator(t *testing.T, keyAttr string) (c *sqs.Client, db *dynamodb.Client, table string, coord *batch.Coordinator) {
	t.Helper()
	c = localtest.NewSQS(t)
	db = localtest.NewDynamoDB(t)
	table = batchTable(t, db, keyAttr)
	coord, err := batch.New(context.Background(), db, c, batch.Config{Table: table, KeyAttr: keyAttr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return c, db, table, coord
}

// createBatch creates batch id with coord: a chunk a body, sent to a new
// queue whose dead-letter queue takes a chunk after 3 receives, and its
// completion job ("assemble") to a new callbacks queue.
func createBatch(t *testing.T, c *sqs.Client, coord *batch.Coordinator, id string, bodies ...string) (chunks, callbacks localtest.Queue) {
	t.Helper()
	chunks = localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	callbacks = localtest.NewQueue(t, c, localtest.QueueOptions{})
	spec := batch.Spec{ID: id, QueueURL: chunks.URL, Callback: batch.Callback{QueueURL: callbacks.URL, Body: "assemble"}}
	for _, b := range bodies {
		spec.Chunks = append(spec.Chunks, producer.Message{Body: b})
	}
	if err := coord.Create(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	return chunks, callbacks
}
