package dlq

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/sqstest"
)

// slowReceives is the fake whose every receive takes step of its clock: a
// scan of many messages that outlasts their visibility timeout, as one of
// sqsworker ui's 10,000 messages does at 30s when each receive takes more
// than 30ms. It counts the visibility changes the fake refused.
type slowReceives struct {
	*sqstest.Fake
	clock   *sqstest.Clock
	step    time.Duration
	refused *atomic.Int64
}

func (s slowReceives) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	s.clock.Advance(s.step)
	return s.Fake.ReceiveMessage(ctx, in, opts...)
}

func (s slowReceives) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out, err := s.Fake.ChangeMessageVisibilityBatch(ctx, in, opts...)
	if err == nil {
		s.refused.Add(int64(len(out.Failed)))
	}
	return out, err
}

// slowScan scans n dead-lettered jobs with a visibility timeout of 30s,
// each receive taking step, and returns the scan's result and the
// visibility changes refused.
func slowScan(t *testing.T, n int, step time.Duration) (*fakeEnv, *ScanResult, int64) {
	t.Helper()
	e := newFakeEnv()
	clock := sqstest.NewClock(time.Now())
	e.f.Now = clock.Now
	e.deadLetterJobs(n)
	var refused atomic.Int64
	q := openOrdersDLQ(t, slowReceives{Fake: e.f, clock: clock, step: step, refused: &refused})
	q.now = clock.Now
	res, err := q.Scan(context.Background(), ScanConfig{Visibility: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return e, res, refused.Load()
}

// A scan that lasts longer than the visibility timeout keeps the messages
// it holds hidden: it reads every message once, never takes held messages
// that come back for the end of the queue, and releases them all.
func TestScanOutlastsVisibility(t *testing.T) {
	t.Parallel()
	const n = 600
	// 60 receives of a second each: twice the visibility timeout.
	e, res, refused := slowScan(t, n, time.Second)
	if c := res.Coverage; res.Scanned != n || c.Seen != n || !c.Complete || c.Shortfall() != "" || refused != 0 {
		t.Errorf("scanned %d, %+v, %q, %d changes refused", res.Scanned, c, c.Shortfall(), refused)
	}
	e.wantDLQDepth(t, "after the scan", n, 0)
	if got := e.f.Calls(sqstest.OpReceiveMessage); got > n/10+2 {
		t.Errorf("%d receives for %d messages: held messages came back", got, n)
	}
}

// A scan that lasts past SQS's 12 hours from its first receives asks for
// no hide past 12 hours from a message's own receive, which SQS refuses,
// nor re-hides messages whose hide had already ended (before: 15,370
// entries refused in this test, most for messages visible again). Held
// messages that reach their 12 hours come back; when they fill the
// receives, the scan says how many it saw.
func TestScanPastTwelveHours(t *testing.T) {
	t.Parallel()
	const n = 600
	// 60 receives of 13 minutes each: 13 hours.
	e, res, refused := slowScan(t, n, 13*time.Minute)
	c := res.Coverage
	if c.Seen < n*9/10 || res.Scanned != c.Seen || (c.Seen < n) != (c.Shortfall() != "") {
		t.Errorf("scanned %d, %+v, %q", res.Scanned, c, c.Shortfall())
	}
	t.Logf("saw %d of %d: %s", c.Seen, n, c.Shortfall())
	if refused != 0 {
		t.Errorf("%d visibility changes refused, want none", refused)
	}
	e.wantDLQDepth(t, "after the scan", n, 0)
}
