package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
)

// batch show, for a batch with more failed chunks than its item lists
// (batch.MaxFailedIndexes), says how many failed chunks it does not list,
// in text and in JSON (failedUnlisted).
func TestBatchShowUnlisted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, db, table, coord := newBatchCoordinator(t, "")
	createBatch(t, c, coord, "report-8", "rows-0", "rows-1", "rows-2", "rows-3")
	// Chunk 0 fails for good, and is listed.
	h := coord.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		return sqsworker.Permanent(errors.New("row 17: invalid date"))
	}))
	m := &sqsworker.Message{ID: "m0", Body: "rows-0", ReceiveCount: 1, MessageAttributes: map[string]sqsworker.MessageAttribute{
		batch.Attribute: {DataType: "String", StringValue: "report-8#0"},
	}}
	if err := h.HandleMessage(ctx, m); err == nil {
		t.Fatal("chunk 0 succeeded")
	}
	// Chunks 1 and 2 failed once the list was full: their items, and
	// the counter alone on the batch's item, as the middleware writes
	// them past batch.MaxFailedIndexes failures (the batch package's tests
	// make them so).
	for _, i := range []string{"1", "2"} {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]ddbtypes.AttributeValue{
			"id":           &ddbtypes.AttributeValueMemberS{Value: "batch#report-8#chunk#" + i},
			"kind":         &ddbtypes.AttributeValueMemberS{Value: "chunk"},
			"chunk_status": &ddbtypes.AttributeValueMemberS{Value: batch.StatusFailed},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table,
		Key:              map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "batch#report-8"}},
		UpdateExpression: aws.String("ADD failed :two"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":two": &ddbtypes.AttributeValueMemberN{Value: "2"}},
	}); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, code := runCLI(t, "", "batch", "show", "report-8", "--table", table)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	t.Logf("\n%s", stdout)
	for _, want := range []string{
		"Failed:         3, 2 of them not listed below: the batch lists at most " + strconv.Itoa(batch.MaxFailedIndexes) + " failed chunks",
		"Pending:        1", "row 17: invalid date",
		"2 more failed chunks, not listed",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	stdout, stderr, code = runCLI(t, "", "-o", "json", "batch", "show", "report-8", "--table", table)
	if code != 0 {
		t.Fatalf("-o json: exit %d: %s", code, stderr)
	}
	var got struct {
		Failed, FailedUnlisted int
		FailedChunks           []struct{ Index int }
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if got.Failed != 3 || got.FailedUnlisted != 2 || len(got.FailedChunks) != 1 || got.FailedChunks[0].Index != 0 {
		t.Errorf("json: %+v", got)
	}
}
