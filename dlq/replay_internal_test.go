package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"golang.org/x/time/rate"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sqsworker/sqsworker"
)

// The replay count: added, incremented, made room for by keeping the
// failure metadata as one attribute, or left out when there is no room.
func TestCopyAttributes(t *testing.T) {
	mk := func(own int, replays string) *Message {
		attrs := map[string]sqsworker.MessageAttribute{}
		for i := range own {
			attrs[string(rune('a'+i))] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
		}
		if replays != "" {
			attrs[AttrReplays] = sqsworker.MessageAttribute{DataType: "Number", StringValue: replays}
		}
		return testMessage(sqsworker.Failure{ErrorClass: "c", Error: "e", MessageID: "orig", SourceQueue: "q", FailedAt: time.Unix(1e9, 0)}, "", attrs)
	}
	for _, tc := range []struct {
		own      int
		replays  string
		want     int
		n        int
		compact  bool
		noteLike string
	}{
		{0, "", 1, 8 + 1, false, ""},
		{1, "", 1, 1 + 8 + 1, false, ""},
		{1, "1", 2, 1 + 1 + 8, false, ""}, // 10 with the count already there
		{2, "", 1, 2 + 1 + 1, true, "kept as the one attribute"},
		{8, "", 1, 8 + 1 + 1, true, ""}, // the runtime kept it as one attribute already
		{9, "", 0, 9 + 1, true, "not added"},
		{8, "4", 5, 8 + 1 + 1, true, ""},
	} {
		m := mk(tc.own, tc.replays)
		attrs, replays, note := copyAttributes(m)
		_, compact := attrs[sqsworker.AttrFailure]
		if replays != tc.want || len(attrs) != tc.n || compact != tc.compact || (tc.noteLike == "") != (note == "") || !strings.Contains(note, tc.noteLike) {
			t.Errorf("%d own attributes, replays %q: count %d, %d attributes (compact %v), note %q", tc.own, tc.replays, replays, len(attrs), compact, note)
		}
		if replays > 0 && aws.ToString(attrs[AttrReplays].StringValue) != strconv.Itoa(replays) {
			t.Errorf("count attribute %v", attrs[AttrReplays])
		}
		got := map[string]sqsworker.MessageAttribute{}
		for k, v := range attrs {
			got[k] = sqsworker.MessageAttribute{DataType: aws.ToString(v.DataType), StringValue: aws.ToString(v.StringValue)}
		}
		f, ok := sqsworker.ParseFailure(got)
		a, _ := json.Marshal(f)
		b, _ := json.Marshal(m.Failure)
		if !ok || string(a) != string(b) {
			t.Errorf("%d own attributes: failure metadata %+v, want %+v", tc.own, f, m.Failure)
		}
	}
}

// A missing API is recognised by its error code, whatever the message;
// other errors pass through.
func TestMoveTaskErrorClassification(t *testing.T) {
	for _, tc := range []struct {
		err         error
		unsupported bool
	}{
		{&smithy.GenericAPIError{Code: "InvalidAction", Message: "Unknown action: StartMessageMoveTask"}, true},
		{&smithy.OperationError{ServiceID: "SQS", OperationName: "StartMessageMoveTask",
			Err: &smithy.GenericAPIError{Code: "UnknownOperationException", Message: "whatever"}}, true},
		{&smithy.GenericAPIError{Code: "AWS.SimpleQueueService.UnsupportedOperation", Message: "Unknown action"}, false},
		{&smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "Unknown action"}, false},
		{errors.New("InvalidAction: Unknown action"), false},
	} {
		err := moveTaskError("StartMessageMoveTask", tc.err)
		if got := errors.Is(err, ErrUnsupported); got != tc.unsupported {
			t.Errorf("%v: unsupported = %v, want %v (%v)", tc.err, got, tc.unsupported, err)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%v is not wrapped: %v", tc.err, err)
		}
		if tc.unsupported && !strings.HasPrefix(err.Error(), "this SQS endpoint does not support message move tasks (StartMessageMoveTask answered ") {
			t.Errorf("%v: %v", tc.err, err)
		}
	}
}

// The rate limit stops waiting when the context ends; without one nothing
// waits.
func TestReplayerWait(t *testing.T) {
	ctx := context.Background()
	if err := (&replayer{}).wait(ctx); err != nil {
		t.Errorf("no limit: %v", err)
	}
	r := &replayer{pace: rate.NewLimiter(rate.Limit(0.001), 1)}
	if err := r.wait(ctx); err != nil { // the burst of one
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.wait(cctx); err == nil {
		t.Error("a cancelled wait returned nil")
	}
}

func TestQueueKey(t *testing.T) {
	for in, want := range map[string]string{
		"https://sqs.eu-west-1.amazonaws.com/123456789012/orders": "123456789012/orders",
		"http://127.0.0.1:9324/000000000000/jobs.fifo":            "000000000000/jobs.fifo",
		"arn:aws:sqs:eu-west-1:123456789012:orders":               "123456789012/orders",
		"orders":                               "",
		"https://sqs.example/orders":           "",
		"https://sqs.example/a/b/c":            "",
		"file:///123/orders":                   "",
		"arn:aws:s3:eu-west-1:123456789012:bk": "",
	} {
		a, n, ok := queueKey(in)
		got := ""
		if ok {
			got = a + "/" + n
		}
		if got != want {
			t.Errorf("queueKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// The retryer of copies without the job's key does not send again a
// request SQS may have applied (an answer lost), and does retry its
// refusals: throttling, a connection never made. It keeps the SDK's
// per-attempt token.
func TestUnappliedRetryer(t *testing.T) {
	o := sqs.Options{Retryer: retry.NewStandard()}
	retryOnlyUnapplied(&o)
	if _, ok := o.Retryer.(aws.RetryerV2); !ok {
		t.Error("the retryer lost GetAttemptToken")
	}
	throttled := &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage",
		Err: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 400}},
			Err: &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded", Fault: smithy.FaultClient}}}
	refused := &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage",
		Err: &smithyhttp.RequestSendError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}}
	lost := &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage",
		Err: &smithyhttp.RequestSendError{Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}}
	for err, want := range map[error]bool{throttled: true, refused: true, lost: false} {
		if got := o.Retryer.IsErrorRetryable(err); got != want {
			t.Errorf("%v: retryable %v, want %v", err, got, want)
		}
	}
}
