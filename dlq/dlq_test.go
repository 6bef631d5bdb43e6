package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
)

// A queue with a redrive policy of its own is a live source queue: Open
// refuses it without receiving anything, unless Force.
func TestOpenRefusesASourceQueue(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	ctx := context.Background()
	e.f.Send(e.orders, "live job")
	for _, name := range []string{"orders", e.orders, sqstest.QueueARN("orders")} {
		_, err := Open(ctx, e.f, name, Config{})
		var nd *NotDeadLetterError
		if !errors.Is(err, ErrNotDeadLetterQueue) || !errors.As(err, &nd) || nd.Queue != e.orders ||
			!strings.Contains(err.Error(), "orders is not a dead-letter queue: it has a redrive policy of its own (its messages go to orders-dlq after 1 receives)") ||
			!strings.HasSuffix(err.Error(), "receiving from a live queue would consume its messages, and purging it would lose them") {
			t.Errorf("Open(%s): %v", name, err)
		}
	}
	if n := e.f.Calls(sqstest.OpReceiveMessage); n != 0 {
		t.Errorf("%d receives from a refused queue", n)
	}
	q, err := Open(ctx, e.f, "orders", Config{Force: true})
	if err != nil || q.RedrivePolicy == nil || len(q.Notes) == 0 || !strings.Contains(q.Notes[0], "opened with force although it has a redrive policy of its own") {
		t.Fatalf("Open with Force: %v, %+v", err, q)
	}
	if _, err := Open(ctx, e.f, "no-such-queue", Config{}); !IsQueueMissing(err) || err.Error() != `queue "no-such-queue" does not exist` {
		t.Errorf("missing queue: %v", err)
	}
}

// The sources of a dead-letter queue: listed where the endpoint lists them,
// found from the redrive policies of the listed queues where it answers
// that it does not know ListDeadLetterSourceQueues, unknown where it lists
// nothing. A queue nothing names as its dead-letter queue is refused where
// that can be known.
func TestOpenSources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		api       func(e *fakeEnv) API
		from      SourceCheck
		note      string
		lonelyErr string
	}{
		{"fake alone", func(e *fakeEnv) API { return e.f }, SourcesUnknown,
			"does not implement ListQueues either: the sources of orders-dlq are unknown", ""},
		{"ListDeadLetterSourceQueues", func(e *fakeEnv) API { return &listing{Fake: e.f, urls: e.urls()} }, SourcesListed,
			"", "lonely is not a dead-letter queue: no queue names it as its dead-letter queue (ListDeadLetterSourceQueues)"},
		{"unsupported, ListQueues", func(e *fakeEnv) API { return &listing{Fake: e.f, urls: e.urls(), unsupported: true} }, SourcesFound,
			"this SQS endpoint does not support ListDeadLetterSourceQueues (ListDeadLetterSourceQueues answered InvalidAction: Unknown action: ListDeadLetterSourceQueues); the sources are found from the redrive policies of the queues ListQueues lists instead",
			"lonely is not a dead-letter queue: no queue names it as its dead-letter queue (redrive policies of the listed queues)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFakeEnv()
			api := tc.api(e)
			q, err := Open(ctx, api, "orders-dlq", Config{})
			if err != nil {
				t.Fatal(err)
			}
			if q.SourcesFrom != tc.from || (tc.from != SourcesUnknown && fmt.Sprint(q.Sources) != fmt.Sprint([]string{e.orders})) {
				t.Errorf("sources %v from %v", q.Sources, q.SourcesFrom)
			}
			if tc.note != "" && !strings.Contains(strings.Join(q.Notes, "\n"), tc.note) {
				t.Errorf("notes %q, want %q", q.Notes, tc.note)
			}
			_, err = Open(ctx, api, "lonely", Config{})
			if tc.lonelyErr == "" && err != nil || tc.lonelyErr != "" && (err == nil || !strings.Contains(err.Error(), tc.lonelyErr)) {
				t.Errorf("lonely: %v, want %q", err, tc.lonelyErr)
			}
		})
	}
	// A listing that fails for another reason is not taken for an empty
	// one: Open cannot tell, and says so.
	e := newFakeEnv()
	_, err := Open(ctx, &listing{Fake: e.f, urls: e.urls(), denied: true}, "orders-dlq", Config{})
	if !errors.Is(err, ErrCannotCheck) || !strings.Contains(err.Error(), "cannot tell whether orders-dlq is a dead-letter queue, its sources could not be listed: ListDeadLetterSourceQueues:") || !strings.Contains(err.Error(), "AccessDenied") {
		t.Errorf("denied: %v", err)
	}
	q, err := Open(ctx, &listing{Fake: e.f, urls: e.urls(), denied: true}, "orders-dlq", Config{Force: true})
	if err != nil || !strings.Contains(strings.Join(q.Notes, "\n"), "opened with force although its sources could not be listed") {
		t.Errorf("denied, forced: %v, %v", err, q)
	}
}

// A receive that fails after SQS handed it messages (its response lost on
// the way) hides them for the visibility timeout: the scan waits for them
// and sees every message. A throttled receive, an error response, hides
// nothing.
func TestScanWaitsForLostReceives(t *testing.T) {
	t.Parallel()
	for _, apiError := range []bool{false, true} {
		t.Run(fmt.Sprint("apiError=", apiError), func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv()
			for i := range 25 {
				deadLetter(e.f, e.ordersDLQ, sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: fmt.Sprint(i)}, fmt.Sprint("job ", i))
			}
			api := &lossy{API: e.f, lose: map[int]bool{2: true}, apiError: apiError}
			q := openOrdersDLQ(t, api)
			start := time.Now()
			res, err := q.Scan(context.Background(), ScanConfig{Visibility: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			c := res.Coverage
			wantLost := 1
			if apiError {
				wantLost = 0
			}
			if res.Scanned != 25 || len(res.Messages) != 25 || c.Seen != 25 || c.Approximate != 25 || !c.Complete ||
				c.LostReceives != wantLost || !c.HiddenUntil.IsZero() || c.Shortfall() != "" {
				t.Errorf("scanned %d, %+v, %q", res.Scanned, c, c.Shortfall())
			}
			if !apiError && time.Since(start) < time.Second {
				t.Errorf("the scan ended after %s: it did not wait for the lost messages", time.Since(start))
			}
			e.wantDLQDepth(t, "after the scan", 25, 0)
		})
	}
}

// A scan interrupted while it waits for lost messages says when they come
// back.
func TestScanInterruptedWhileLost(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.deadLetterJobs(5)
	api := &lossy{API: e.f, lose: map[int]bool{1: true}}
	q := openOrdersDLQ(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	res, err := q.Scan(ctx, ScanConfig{Visibility: 600 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) || res.Coverage.Complete || res.Coverage.HiddenUntil.IsZero() ||
		!strings.Contains(res.Coverage.Shortfall(), "1 receive(s) lost their response on the way, and the messages SQS had handed them stay hidden until") {
		t.Errorf("%v, %+v, %q", err, res.Coverage, res.Coverage.Shortfall())
	}
}

// blocking is the fake with receives that take their time to answer, after
// SQS handed them messages: a test cancels the caller's context meanwhile.
type blocking struct {
	API
	started chan struct{} // receives one value per receive under way
	finish  chan struct{} // closed to let the receives answer
	mu      sync.Mutex
	ctxErrs []error // the context of each receive, when it answered
}

func (b *blocking) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := b.API.ReceiveMessage(ctx, in, opts...)
	b.started <- struct{}{}
	<-b.finish
	b.mu.Lock()
	b.ctxErrs = append(b.ctxErrs, ctx.Err())
	b.mu.Unlock()
	return out, err
}

// A receive under way is never cut short: a scan cancelled meanwhile lets
// it answer, then releases what it was handed at once.
func TestScanNeverCutsAReceive(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.deadLetterJobs(7)
	b := &blocking{API: e.f, started: make(chan struct{}, 1), finish: make(chan struct{})}
	q := openOrdersDLQ(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		res *ScanResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := q.Scan(ctx, ScanConfig{Visibility: 600 * time.Second})
		done <- result{res, err}
	}()
	<-b.started // SQS has handed the first receive its messages
	cancel()
	close(b.finish)
	r := <-done
	if !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, ErrInterrupted) || r.res.Coverage.Seen != 7 || r.res.Coverage.Complete || r.res.Coverage.LostReceives != 0 {
		t.Errorf("%v, %+v", r.err, r.res.Coverage)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ctxErrs) != 1 || b.ctxErrs[0] != nil {
		t.Errorf("receives answered with context errors %v: one was cut short", b.ctxErrs)
	}
	e.wantDLQDepth(t, "after the interrupted scan, whose receives hid for 600s", 7, 0)
}

// A scan compares what it saw with the queue's count: messages another
// consumer holds are not seen, and the scan says so.
func TestScanShortfall(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.deadLetterJobs(10)
	out, err := e.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.ordersDLQ), MaxNumberOfMessages: 3, VisibilityTimeout: 600})
	if err != nil || len(out.Messages) != 3 {
		t.Fatal(err)
	}
	q := openOrdersDLQ(t, e.f)
	res, err := q.Scan(context.Background(), ScanConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Coverage.Shortfall(); res.Scanned != 7 || !strings.HasPrefix(s, "saw 7 of about 10 messages: the others were in flight") {
		t.Errorf("scanned %d: %q", res.Scanned, s)
	}
	// Max and Until stop a scan early: no shortfall then.
	res, err = q.Scan(context.Background(), ScanConfig{Max: 2})
	if err != nil || res.Scanned != 2 || !res.Truncated || res.Coverage.Complete || res.Coverage.Shortfall() != "" {
		t.Errorf("Max 2: %v, %+v", err, res)
	}
	e.wantDLQDepth(t, "after the scans", 7, 3)
}

// Failure metadata is verified: the worker's copies naming a source of the
// queue are; metadata naming a queue that sends its dead letters elsewhere,
// or none, or a queue that does not exist, is not; nor is metadata on a
// message that SQS's own redrive moved (whoever sent it wrote it).
func TestScanVerifiesMetadata(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		api  func(e *fakeEnv) API
	}{
		{"sources unknown: redrive policies", func(e *fakeEnv) API { return e.f }},
		{"sources listed", func(e *fakeEnv) API { return &listing{Fake: e.f, urls: e.urls()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv()
			fail := func(src string) sqsworker.Failure {
				return sqsworker.Failure{ErrorClass: "c", SourceQueue: src, MessageID: "m", FailedAt: time.Now()}
			}
			deadLetter(e.f, e.ordersDLQ, fail(e.orders), "worker copy")
			deadLetter(e.f, e.ordersDLQ, fail(e.billing), "forged: billing")
			deadLetter(e.f, e.ordersDLQ, fail(sqstest.QueueURL("gone")), "forged: gone")
			deadLetter(e.f, e.ordersDLQ, fail("orders"), "forged: not a URL")
			forged, _ := fail(e.billing).AddTo(nil)
			redrive(t, e.f, e.orders, "redriven with forged metadata", forged)
			redrive(t, e.f, e.orders, "redriven", nil)
			q := openOrdersDLQ(t, tc.api(e))
			res, err := q.Scan(context.Background(), ScanConfig{})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"worker copy":                   "",
				"forged: billing":               "source queue billing does not send its dead letters to orders-dlq",
				"forged: gone":                  "source queue " + sqstest.QueueURL("gone") + " does not exist",
				"forged: not a URL":             `"orders" is neither a queue URL nor a queue ARN`,
				"redriven with forged metadata": "SQS's redrive moved it here from orders: no sqsworker runtime dead-lettered it",
				"redriven":                      "",
			}
			for _, m := range res.Messages {
				w, ok := want[m.Body]
				if !ok || (w == "") != (m.Unverified == "") || !strings.Contains(m.Unverified, w) {
					t.Errorf("%s: unverified %q, want %q", m.Body, m.Unverified, w)
				}
				if m.Body == "worker copy" && !m.Verified() || m.Body == "redriven" && (m.HasFailure || m.Verified() || m.RedriveSource != sqstest.QueueARN("orders")) {
					t.Errorf("%s: %+v", m.Body, m)
				}
				delete(want, m.Body)
			}
			if len(want) > 0 {
				t.Errorf("not seen: %v", want)
			}
		})
	}
}

// A replay without a destination of its own sends a message only to a
// queue that sends its dead letters to the dead-letter queue: the one
// SQS's redrive moved it from, else the one its metadata names if that is
// a source. Forged metadata naming another queue moves nothing there.
func TestReplayOnlyToSources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		api  func(e *fakeEnv) API
	}{
		{"sources unknown: redrive policies", func(e *fakeEnv) API { return e.f }},
		{"sources listed", func(e *fakeEnv) API { return &listing{Fake: e.f, urls: e.urls()} }},
		{"sources found", func(e *fakeEnv) API { return &listing{Fake: e.f, urls: e.urls(), unsupported: true} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv()
			fail := func(src string) sqsworker.Failure {
				return sqsworker.Failure{ErrorClass: "c", SourceQueue: src, MessageID: "m", FailedAt: time.Now()}
			}
			deadLetter(e.f, e.ordersDLQ, fail(e.orders), "worker copy")
			forgedID := deadLetter(e.f, e.ordersDLQ, fail(e.billing), "forged: billing")
			forged, _ := fail(e.billing).AddTo(nil)
			redrive(t, e.f, e.orders, "redriven with forged metadata", forged)
			e.f.Send(e.ordersDLQ, "no metadata")
			q := openOrdersDLQ(t, tc.api(e))
			var audit []AuditRecord
			cfg := ReplayConfig{Audit: Audit{Record: func(_ context.Context, r AuditRecord) error { audit = append(audit, r); return nil }}}
			plan, err := q.Plan(context.Background(), cfg)
			if err != nil || plan.Matched != 2 || plan.Refused != 1 || plan.NoSource != 1 || len(plan.Stayed) != 1 || plan.Stayed[0].MessageID != forgedID ||
				!strings.Contains(plan.Stayed[0].Reason, "source queue billing does not send its dead letters to orders-dlq") || len(audit) != 0 {
				t.Fatalf("plan: %v, %+v", err, plan)
			}
			res, err := q.Replay(context.Background(), cfg)
			if err != nil || res.Moved != 2 || res.Refused != 1 || res.NoSource != 1 || len(audit) != 4 {
				t.Fatalf("replay: %v, %+v", err, res)
			}
			for _, m := range res.Messages {
				if m.Destination != e.orders {
					t.Errorf("%s went to %s", m.MessageID, m.Destination)
				}
			}
			if v, _, _ := e.f.Depth(e.orders); v != 2 {
				t.Errorf("orders holds %d", v)
			}
			if v, f, d := e.f.Depth(e.billing); v+f+d != 0 {
				t.Errorf("billing received %d message(s)", v+f+d)
			}
			e.wantDLQDepth(t, "orders-dlq", 2, 0)
			// With a destination of the operator's choice, the others go.
			res, err = q.Replay(context.Background(), ReplayConfig{To: "lonely"})
			if err != nil || res.Moved != 2 {
				t.Errorf("replay to lonely: %v, %+v", err, res)
			}
		})
	}
}

// Every message is recorded with its caller before its copy is sent and
// once it is moved; a record that fails stops the replay before the next
// message, and a replay-start record that fails moves nothing.
func TestReplayAudit(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	for i := range 3 {
		deadLetter(e.f, e.ordersDLQ, sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: fmt.Sprint("orig-", i)}, fmt.Sprint("job ", i))
	}
	q := openOrdersDLQ(t, e.f)
	var recs []AuditRecord
	fail := errors.New("disk full")
	res, err := q.Replay(context.Background(), ReplayConfig{Filter: Filter{ErrorClasses: []string{"c"}}, Audit: Audit{
		CallerNote: "sts:GetCallerIdentity failed: no STS here",
		Record: func(_ context.Context, r AuditRecord) error {
			recs = append(recs, r)
			if len(recs) == 4 {
				return fail
			}
			return nil
		},
	}})
	if !errors.Is(err, fail) || res.Moved != 2 || len(recs) != 4 || !strings.Contains(err.Error(), "was moved to orders as") {
		t.Fatalf("%v, %+v", err, res)
	}
	for i, r := range recs {
		if r.Caller != UnknownCaller || r.CallerNote != "sts:GetCallerIdentity failed: no STS here" ||
			r.DLQ != e.ordersDLQ || r.Destination != e.orders ||
			!strings.HasPrefix(r.OriginalMessageID, "orig-") || r.Filter != `error-class="c"` || time.Since(r.Time) > time.Minute {
			t.Errorf("record %+v", r)
		}
		if i%2 == 0 && (r.Action != ActionReplayStart || r.Deleted || r.NewMessageID != "" || r.DLQMessageID != recs[i+1].DLQMessageID) {
			t.Errorf("replay-start record %+v", r)
		}
		if i%2 == 1 && (r.Action != ActionReplay || !r.Deleted || r.Replays != 1 || r.NewMessageID == "") {
			t.Errorf("replay record %+v", r)
		}
	}
	e.wantDLQDepth(t, "orders-dlq", 1, 0)
	res, err = q.Replay(context.Background(), ReplayConfig{Audit: Audit{Record: func(context.Context, AuditRecord) error { return fail }}})
	if !errors.Is(err, fail) || res.Moved != 0 || res.Matched != 0 || !strings.Contains(err.Error(), "was not moved: the audit record failed") {
		t.Fatalf("replay-start record failing: %v, %+v", err, res)
	}
	if v, _, _ := e.f.Depth(e.orders); v != 2 {
		t.Errorf("orders holds %d", v)
	}
	e.wantDLQDepth(t, "orders-dlq", 1, 0)
}

// The limits of a replay: Limit, interruption between two messages.
func TestReplayLimitAndInterrupt(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.deadLetterJobs(6)
	q := openOrdersDLQ(t, e.f)
	res, err := q.Replay(context.Background(), ReplayConfig{Limit: 2})
	if err != nil || res.Moved != 2 || !res.LimitHit || res.Filter != "all messages (limit 2)" {
		t.Fatalf("limit: %v, %+v", err, res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res, err = q.Replay(ctx, ReplayConfig{Progress: func(p Progress) {
		if p.Moved == 1 {
			cancel()
		}
	}})
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) || res.Moved != 1 || !res.Interrupted ||
		!strings.HasPrefix(err.Error(), "interrupted: 1 message(s) moved, the others stay in orders-dlq") {
		t.Errorf("interrupt: %v, %+v", err, res)
	}
	e.wantDLQDepth(t, "orders-dlq", 3, 0)
	if _, err := q.Replay(context.Background(), ReplayConfig{To: "orders-dlq"}); err == nil || !strings.Contains(err.Error(), "is the dead-letter queue itself") {
		t.Errorf("to itself: %v", err)
	}
	if _, err := q.Replay(context.Background(), ReplayConfig{PerSecond: -1, Limit: -1, Visibility: 1500 * time.Millisecond}); err == nil ||
		!strings.Contains(err.Error(), "rate -1") || !strings.Contains(err.Error(), "limit -1") || !strings.Contains(err.Error(), "visibility timeout 1.5s") {
		t.Errorf("bad config: %v", err)
	}
}

// A client without PurgeQueue or message move tasks is told so, and
// nothing is recorded.
func TestUnsupportedOperations(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	api := noMoveTasks{e.f}
	q := openOrdersDLQ(t, api)
	recorded := 0
	audit := Audit{Record: func(context.Context, AuditRecord) error { recorded++; return nil }}
	if err := q.Purge(context.Background(), PurgeConfig{Audit: audit}); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "does not implement PurgeQueue") {
		t.Errorf("purge: %v", err)
	}
	if _, err := q.StartRedrive(context.Background(), RedriveConfig{Audit: audit}); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "message move tasks") {
		t.Errorf("redrive: %v", err)
	}
	if _, err := CancelRedrive(context.Background(), api, "h", audit); !errors.Is(err, ErrUnsupported) {
		t.Errorf("cancel: %v", err)
	}
	if recorded != 0 {
		t.Errorf("%d records", recorded)
	}
}

// noMoveTasks is the fake without its message move tasks, as an endpoint
// that lacks them.
type noMoveTasks struct{ API }

// taskFake is the fake with message move tasks that start and are
// listed, for the audit of a redrive.
type taskFake struct {
	*sqstest.Fake
	started []*sqs.StartMessageMoveTaskInput
}

func (m *taskFake) StartMessageMoveTask(_ context.Context, in *sqs.StartMessageMoveTaskInput, _ ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error) {
	m.started = append(m.started, in)
	return &sqs.StartMessageMoveTaskOutput{TaskHandle: aws.String(fmt.Sprint("task-", len(m.started)))}, nil
}

func (m *taskFake) ListMessageMoveTasks(context.Context, *sqs.ListMessageMoveTasksInput, ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error) {
	return &sqs.ListMessageMoveTasksOutput{}, nil
}

func (m *taskFake) CancelMessageMoveTask(context.Context, *sqs.CancelMessageMoveTaskInput, ...func(*sqs.Options)) (*sqs.CancelMessageMoveTaskOutput, error) {
	return &sqs.CancelMessageMoveTaskOutput{ApproximateNumberOfMessagesMoved: 3}, nil
}

// A redrive's plan starts nothing; the redrive (before and after it
// starts) and its cancellation are recorded.
func TestRedriveAudited(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	deadLetter(e.f, e.ordersDLQ, sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders}, "job")
	api := &taskFake{Fake: e.f}
	q := openOrdersDLQ(t, api)
	var recs []AuditRecord
	audit := Audit{Caller: "arn:aws:iam::000000000000:user/op", Record: func(_ context.Context, r AuditRecord) error { recs = append(recs, r); return nil }}
	p, err := q.PlanRedrive(context.Background(), RedriveConfig{To: "lonely", PerSecond: 5, Audit: audit})
	if err != nil || p.Approximate != 1 || p.Destination == nil || p.Destination.URL != e.lonely || len(api.started) != 0 || len(recs) != 0 {
		t.Fatalf("plan: %v, %+v", err, p)
	}
	p, err = q.StartRedrive(context.Background(), RedriveConfig{To: "lonely", PerSecond: 5, Audit: audit})
	if err != nil || p.TaskHandle != "task-1" || len(api.started) != 1 || aws.ToString(api.started[0].DestinationArn) != sqstest.QueueARN("lonely") ||
		aws.ToInt32(api.started[0].MaxNumberOfMessagesPerSecond) != 5 {
		t.Fatalf("start: %v, %+v", err, p)
	}
	if _, err := CancelRedrive(context.Background(), api, "task-1", audit); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Action != ActionRedriveStart || recs[0].TaskHandle != "" || recs[0].Destination != sqstest.QueueARN("lonely") ||
		recs[1].Action != ActionRedrive || recs[1].TaskHandle != "task-1" || recs[1].Caller != "arn:aws:iam::000000000000:user/op" ||
		recs[1].ApproximateMessages != 1 || recs[1].PerSecond != 5 || recs[1].Destination != sqstest.QueueARN("lonely") ||
		recs[2].Action != ActionRedriveCancel || recs[2].TaskHandle != "task-1" {
		t.Errorf("records %+v", recs)
	}
	if _, err := q.PlanRedrive(context.Background(), RedriveConfig{PerSecond: 501}); err == nil || !strings.Contains(err.Error(), "rate 501") {
		t.Errorf("rate 501: %v", err)
	}
}

// A message SQS's own redrive moved keeps the attempts of the copies before
// it (sqsworker.prior-attempts, the runtimes' for a backoff above 12
// hours): its replay starts from fresh attempts, as the runtimes' own
// dead-letter copies do, instead of from where it was dead-lettered (one
// failure from the dead-letter queue again). A time it may run
// (sqsworker.not-before) is kept: a past one runs the job at once, one
// still ahead holds it until then.
func TestReplayStartsFromFreshAttempts(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	past := sqsworker.NotBeforeAttribute(time.Now().Add(-time.Hour))
	redrive(t, e.f, e.orders, "webhook", map[string]sqsworker.MessageAttribute{
		sqsworker.AttrPriorAttempts: {DataType: "Number", StringValue: "4"},
		sqsworker.AttrNotBefore:     past,
		"tenant":                    {DataType: "String", StringValue: "acme"},
	})
	q := openOrdersDLQ(t, e.f)
	if res, err := q.Replay(context.Background(), ReplayConfig{}); err != nil || res.Moved != 1 {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	out, err := e.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.orders), MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
	}
	a := out.Messages[0].MessageAttributes
	if _, ok := a[sqsworker.AttrPriorAttempts]; ok {
		t.Errorf("the replayed copy has %s: its attempts carry over", sqsworker.AttrPriorAttempts)
	}
	if got := aws.ToString(a[sqsworker.AttrNotBefore].StringValue); got != past.StringValue {
		t.Errorf("%s %q, want %q", sqsworker.AttrNotBefore, got, past.StringValue)
	}
	if got := aws.ToString(a["tenant"].StringValue); got != "acme" {
		t.Errorf("tenant %q", got)
	}
}

// A copy this run replayed that SQS's redrive moves back to the dead-letter
// queue (its handler's process died on its last receive) is the copy
// itself, its ID kept, with the failure the run replayed: it is not
// replayed a second time by the same run, as a copy that a runtime
// dead-lettered is not.
func TestReplayedCopyRedrivenBackIsNotReplayedAgain(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.deadLetterJobs(2)
	api := &redrivenOnSend{Fake: e.f, t: t, source: e.orders}
	q := openOrdersDLQ(t, api)
	res, err := q.Replay(context.Background(), ReplayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 2 || res.FailedAgain != 1 {
		t.Errorf("moved %d, failed again %d; want both jobs moved once and the redriven copy left", res.Moved, res.FailedAgain)
	}
	if v, f, _ := e.f.Depth(e.ordersDLQ); v+f != 1 {
		t.Errorf("%d messages in the dead-letter queue, want the redriven copy", v+f)
	}
	if v, f, _ := e.f.Depth(e.orders); v+f != 1 {
		t.Errorf("%d messages in the source queue, want the other job's copy", v+f)
	}
}

// A queue given by an ARN of another region than the client's is refused,
// naming the region to give the client: GetQueueUrl finds a queue by name
// and account in the client's region, and opened the queue of the same
// name there, which a purge or a replay would then act on. As a replay's
// destination too.
func TestOpenRefusesAnARNOfAnotherRegion(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	ctx := context.Background()
	other := strings.Replace(sqstest.QueueARN("orders-dlq"), ":us-east-1:", ":eu-west-1:", 1)
	if other == sqstest.QueueARN("orders-dlq") {
		t.Fatalf("the fake's ARNs are not of us-east-1: %s", other)
	}
	if _, err := Open(ctx, e.f, other, Config{Force: true}); !errors.Is(err, ErrOtherRegion) || !strings.Contains(err.Error(), "--region eu-west-1") {
		t.Errorf("Open(%s): %v, want it refused, naming the region", other, err)
	}
	q, err := Open(ctx, e.f, sqstest.QueueARN("orders-dlq"), Config{})
	if err != nil {
		t.Fatalf("Open by the ARN of the client's region: %v", err)
	}
	otherSource := strings.Replace(sqstest.QueueARN("orders"), ":us-east-1:", ":eu-west-1:", 1)
	if _, err := q.Target(ctx, otherSource); !errors.Is(err, ErrOtherRegion) {
		t.Errorf("Target(%s): %v, want it refused", otherSource, err)
	}
	if n := e.f.Calls(sqstest.OpReceiveMessage); n != 0 {
		t.Errorf("%d receives", n)
	}
}
