package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
)

// A summary counts the messages SQS's own redrive moved apart, under the
// queue they came from, not under the error class of the earlier failure
// their metadata names (a replayed copy keeps its original's): that class
// would count messages --error-class never selects.
func TestSummaryCountsRedrivenMessagesApart(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	fail := sqsworker.Failure{ErrorClass: "timeout", SourceQueue: "https://sqs.us-east-1.amazonaws.com/000000000000/orders", FailedAt: at}
	failed := &dlq.Message{Failure: fail, HasFailure: true}
	redriven := &dlq.Message{Failure: fail, HasFailure: true, RedriveSource: "arn:aws:sqs:us-east-1:000000000000:orders"}
	var out bytes.Buffer
	a := &app{out: &out, err: &out, output: "json"}
	if err := a.summarize([]*dlq.Message{failed, redriven}); err != nil {
		t.Fatal(err)
	}
	var got []classCount
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	want := map[string]int{"timeout/orders": 1, redrivenClass + "/orders": 1}
	if len(got) != 2 {
		t.Fatalf("summary %+v, want %v", got, want)
	}
	for _, c := range got {
		if want[c.ErrorClass+"/"+c.SourceQueue] != c.Messages {
			t.Errorf("summary %+v, want %v", got, want)
		}
		if c.ErrorClass == redrivenClass && !c.LastFailed.IsZero() {
			t.Errorf("redriven messages counted with a failure time: %+v", c)
		}
	}
}
