package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
)

var (
	testFirstReceived = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	testFailedAt      = time.Date(2026, 3, 1, 10, 5, 0, 123_000_000, time.UTC)
)

// testMessage returns a message as a runtime hands it to Move, with one
// attribute of its own.
func testMessage(body string) *sqsworker.Message {
	return &sqsworker.Message{
		ID:                "0b7a5f8e-6a52-4d1c-9f39-3f1d2c8e4a10",
		Body:              body,
		QueueURL:          "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
		ReceiveCount:      3,
		FirstReceivedAt:   testFirstReceived,
		MessageAttributes: map[string]sqsworker.MessageAttribute{"trace-id": {DataType: "String", StringValue: "t-42"}},
	}
}

func testMover(api Sender, url string) *Mover {
	return &Mover{API: api, URL: url, Host: "worker-1", Now: func() time.Time { return testFailedAt }}
}

var errBadPayload = sqsworker.Permanent(errors.New("malformed payload"))

// metadataSizes returns the bytes that the failure metadata of a move of m
// adds to the message, one attribute per field and as one JSON attribute.
func metadataSizes(t *testing.T, mv *Mover, m *sqsworker.Message, cause error) (fields, json int) {
	t.Helper()
	f := mv.failure(m, cause)
	sep, ok := f.AddTo(nil)
	if !ok || len(sep) != 8 {
		t.Fatalf("AddTo(nil) = %v, %v", sep, ok)
	}
	nine := map[string]sqsworker.MessageAttribute{}
	for i := range 9 {
		nine[fmt.Sprint("a", i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	one, ok := f.AddTo(nine)
	if _, found := one[sqsworker.AttrFailure]; !ok || !found {
		t.Fatalf("AddTo(nine attributes) = %v, %v", one, ok)
	}
	fields = sqsworker.MessageSize("", sep)
	json = sqsworker.MessageSize("", one) - sqsworker.MessageSize("", nine)
	if json >= fields {
		t.Fatalf("the JSON form (%d bytes) is not smaller than the fields (%d): the cases below assume it is", json, fields)
	}
	return fields, json
}

// receiveOne receives the one message of the queue at url.
func receiveOne(t *testing.T, api interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
}, url string) *sqsworker.Message {
	t.Helper()
	out, err := api.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		t.Fatalf("receiving from %s: %v", url, err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("received %d messages from %s, want 1", len(out.Messages), url)
	}
	return sqsmsg.FromSDK(url, &out.Messages[0])
}

// form names the form of the failure metadata in attrs: "fields", "json" or
// "none".
func form(attrs map[string]sqsworker.MessageAttribute) string {
	_, json := attrs[sqsworker.AttrFailure]
	_, class := attrs[sqsworker.AttrFailureClass]
	switch {
	case json && class:
		return "both"
	case json:
		return "json"
	case class:
		return "fields"
	}
	return "none"
}

// checkCopy checks that got is a copy of m with failure metadata in the form
// want.
func checkCopy(t *testing.T, got, m *sqsworker.Message, want string) {
	t.Helper()
	if got.Body != m.Body {
		t.Errorf("copy's body is %d bytes, want the original's %d", len(got.Body), len(m.Body))
	}
	for k, v := range m.MessageAttributes {
		if g := got.MessageAttributes[k]; g.DataType != v.DataType || g.StringValue != v.StringValue {
			t.Errorf("copy's attribute %s = %+v, want %+v", k, g, v)
		}
	}
	if f := form(got.MessageAttributes); f != want {
		t.Fatalf("copy's failure metadata: %s, want %s (attributes %v)", f, want, got.MessageAttributes)
	}
	if want == "none" {
		return
	}
	f, ok := sqsworker.ParseFailure(got.MessageAttributes)
	if !ok || f.MessageID != m.ID || f.Attempts != m.ReceiveCount || f.ErrorClass != "*errors.errorString" ||
		f.Error != "permanent: malformed payload" || f.SourceQueue != m.QueueURL || f.Host != "worker-1" ||
		!f.FailedAt.Equal(testFailedAt) || !f.FirstReceived.Equal(testFirstReceived) {
		t.Errorf("ParseFailure(copy) = %+v, %v", f, ok)
	}
}

// TestMoverSizesCopy moves messages whose size leaves more or less room for
// failure metadata under the 1 MiB limit to a dead-letter queue of the Fake,
// which refuses messages over the queue's MaximumMessageSize as SQS does, and
// checks that each moves with one SendMessage, in the largest form of
// metadata that fits.
func TestMoverSizesCopy(t *testing.T) {
	own := sqsworker.MessageSize("", testMessage("").MessageAttributes)
	fields, json := metadataSizes(t, testMover(nil, "u"), testMessage(""), errBadPayload)
	for _, c := range []struct {
		name string
		body int
		form string
	}{
		{"small", 100, "fields"},
		{"fields exactly at the limit", sqsworker.MaxMessageSize - own - fields, "fields"},
		{"one byte over for the fields", sqsworker.MaxMessageSize - own - fields + 1, "json"},
		{"JSON exactly at the limit", sqsworker.MaxMessageSize - own - json, "json"},
		{"one byte over for the JSON", sqsworker.MaxMessageSize - own - json + 1, "none"},
		{"1 MiB minus a few bytes", sqsworker.MaxMessageSize - own - 5, "none"},
		{"1 MiB exactly", sqsworker.MaxMessageSize - own, "none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := sqstest.NewFake()
			dlq := f.CreateQueue("jobs-dlq", nil)
			m := testMessage(strings.Repeat("x", c.body))
			ok, err := testMover(f, dlq).Move(t.Context(), m, errBadPayload)
			if err != nil || ok != (c.form != "none") {
				t.Fatalf("Move = %v, %v; want %v, nil", ok, err, c.form != "none")
			}
			if n := f.Calls(sqstest.OpSendMessage); n != 1 {
				t.Errorf("%d SendMessage calls, want 1", n)
			}
			checkCopy(t, receiveOne(t, f, dlq), m, c.form)
		})
	}
}

// TestMoverMaxMessageSize: with the dead-letter queue's lower
// MaximumMessageSize known, the metadata is sized to it, with one
// SendMessage.
func TestMoverMaxMessageSize(t *testing.T) {
	const limit = 2048
	own := sqsworker.MessageSize("", testMessage("").MessageAttributes)
	fields, json := metadataSizes(t, testMover(nil, "u"), testMessage(""), errBadPayload)
	for _, c := range []struct {
		body int
		form string
	}{
		{limit - own - fields, "fields"},
		{limit - own - fields + 1, "json"},
		{limit - own - json + 1, "none"},
	} {
		t.Run(fmt.Sprint(c.body), func(t *testing.T) {
			f := sqstest.NewFake()
			dlq := f.CreateQueue("jobs-dlq", map[string]string{"MaximumMessageSize": fmt.Sprint(limit)})
			n, err := LoadMaxMessageSize(t.Context(), f, dlq)
			if err != nil || n != limit {
				t.Fatalf("LoadMaxMessageSize = %d, %v", n, err)
			}
			mv := testMover(f, dlq)
			mv.MaxMessageSize = n
			m := testMessage(strings.Repeat("x", c.body))
			ok, err := mv.Move(t.Context(), m, errBadPayload)
			if err != nil || ok != (c.form != "none") {
				t.Fatalf("Move = %v, %v", ok, err)
			}
			if n := f.Calls(sqstest.OpSendMessage); n != 1 {
				t.Errorf("%d SendMessage calls, want 1", n)
			}
			checkCopy(t, receiveOne(t, f, dlq), m, c.form)
		})
	}
}

// TestMoverRetriesWithoutMetadata: when the dead-letter queue's lower limit
// is not known, SQS refuses the copy with metadata and Move sends it again
// without, keeping the trace header and, on FIFO queues, the group and
// deduplication ID.
func TestMoverRetriesWithoutMetadata(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(fmt.Sprint("fifo=", fifo), func(t *testing.T) {
			f := sqstest.NewFake()
			name := "jobs-dlq"
			if fifo {
				name += ".fifo"
			}
			attrs := map[string]string{"MaximumMessageSize": "2048"}
			if fifo {
				attrs["FifoQueue"] = "true"
			}
			dlq := f.CreateQueue(name, attrs)
			mv := testMover(f, dlq)
			mv.FIFO = fifo
			m := testMessage(strings.Repeat("x", 2000))
			m.GroupID = "orders-7"
			m.Attributes = map[string]string{sqsworker.AttrAWSTraceHeader: "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"}
			ok, err := mv.Move(t.Context(), m, errBadPayload)
			if err != nil || ok {
				t.Fatalf("Move = %v, %v; want false, nil", ok, err)
			}
			if n := f.Calls(sqstest.OpSendMessage); n != 2 {
				t.Errorf("%d SendMessage calls, want 2", n)
			}
			got := receiveOne(t, f, dlq)
			checkCopy(t, got, m, "none")
			if th := got.Attributes[sqsworker.AttrAWSTraceHeader]; th != m.Attributes[sqsworker.AttrAWSTraceHeader] {
				t.Errorf("copy's trace header = %q", th)
			}
			if fifo && (got.GroupID != m.GroupID || got.DeduplicationID != m.ID) {
				t.Errorf("copy's group and deduplication ID = %q, %q; want %q, %q", got.GroupID, got.DeduplicationID, m.GroupID, m.ID)
			}
			if !fifo && got.GroupID != m.GroupID { // a fair queue's tenant
				t.Errorf("copy's group = %q, want %q", got.GroupID, m.GroupID)
			}
		})
	}
}

// TestMoverMessageTooLarge: a message larger than the dead-letter queue
// accepts cannot be moved; Move returns SQS's error, after one retry without
// metadata when it sent metadata.
func TestMoverMessageTooLarge(t *testing.T) {
	for _, c := range []struct {
		maxSize, calls int
	}{{0, 2}, {2048, 1}} {
		t.Run(fmt.Sprint("MaxMessageSize=", c.maxSize), func(t *testing.T) {
			f := sqstest.NewFake()
			dlq := f.CreateQueue("jobs-dlq", map[string]string{"MaximumMessageSize": "2048"})
			mv := testMover(f, dlq)
			mv.MaxMessageSize = c.maxSize
			ok, err := mv.Move(t.Context(), testMessage(strings.Repeat("x", 2100)), errBadPayload)
			var api smithy.APIError
			if ok || !errors.As(err, &api) || api.ErrorCode() != "InvalidParameterValue" {
				t.Fatalf("Move = %v, %v; want false, InvalidParameterValue", ok, err)
			}
			if n := f.Calls(sqstest.OpSendMessage); n != c.calls {
				t.Errorf("%d SendMessage calls, want %d", n, c.calls)
			}
			if v, inFlight, _ := f.Depth(dlq); v+inFlight != 0 {
				t.Errorf("dead-letter queue holds %d messages", v+inFlight)
			}
		})
	}
}

// TestMoverOtherErrors: only an invalid-parameter refusal makes Move send
// again without metadata; other errors are returned as they are, for the
// runtime to retry the move later.
func TestMoverOtherErrors(t *testing.T) {
	f := sqstest.NewFake()
	dlq := f.CreateQueue("jobs-dlq", nil)
	f.FailNext(sqstest.OpSendMessage, &smithy.GenericAPIError{Code: "RequestThrottled"}, 1)
	ok, err := testMover(f, dlq).Move(t.Context(), testMessage("body"), errBadPayload)
	var api smithy.APIError
	if !ok || !errors.As(err, &api) || api.ErrorCode() != "RequestThrottled" || !strings.Contains(err.Error(), "dead-letter queue") {
		t.Fatalf("Move = %v, %v; want true, RequestThrottled", ok, err)
	}
	if n := f.Calls(sqstest.OpSendMessage); n != 1 {
		t.Errorf("%d SendMessage calls, want 1", n)
	}

	// Any InvalidParameterValue, in either form of the code: the metadata is
	// all a second send changes.
	for _, code := range []string{"InvalidParameterValue", "AWS.SimpleQueueService.InvalidParameterValue"} {
		f := sqstest.NewFake()
		dlq := f.CreateQueue("jobs-dlq", nil)
		f.FailNext(sqstest.OpSendMessage, &smithy.GenericAPIError{Code: code, Message: "Message (user) attribute value contains invalid characters."}, 1)
		m := testMessage("body")
		ok, err = testMover(f, dlq).Move(t.Context(), m, errBadPayload)
		if ok || err != nil {
			t.Fatalf("Move after an injected %s = %v, %v; want false, nil", code, ok, err)
		}
		if n := f.Calls(sqstest.OpSendMessage); n != 2 {
			t.Errorf("%s: %d SendMessage calls, want 2", code, n)
		}
		checkCopy(t, receiveOne(t, f, dlq), m, "none")
	}
}

func TestLoadMaxMessageSize(t *testing.T) {
	f := sqstest.NewFake()
	small := f.CreateQueue("small", map[string]string{"MaximumMessageSize": "1024"})
	plain := f.CreateQueue("plain", nil)
	bad := f.CreateQueue("bad", nil)
	f.SetAttribute(bad, "MaximumMessageSize", "lots")
	for url, want := range map[string]int{small: 1024, plain: sqsworker.MaxMessageSize} {
		if n, err := LoadMaxMessageSize(t.Context(), f, url); n != want || err != nil {
			t.Errorf("LoadMaxMessageSize(%s) = %d, %v; want %d", url, n, err, want)
		}
	}
	if _, err := LoadMaxMessageSize(t.Context(), f, bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("LoadMaxMessageSize(malformed) = %v, want ErrInvalid", err)
	}
	var missing *types.QueueDoesNotExist
	if _, err := LoadMaxMessageSize(t.Context(), f, sqstest.QueueURL("none")); !errors.As(err, &missing) {
		t.Errorf("LoadMaxMessageSize(missing queue) = %v", err)
	}
}
