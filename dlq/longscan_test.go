package dlq

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/sqstest"
)

// slowReceives is the fake whose every receive takes step of its clock: a
// scan of many messages that outlasts their visibility timeout, as one of
// sqsworker ui's 10,000 messages does at 30s when each receive takes more
// than 30ms.
type slowReceives struct {
	*sqstest.Fake
	clock *sqstest.Clock
	step  time.Duration
}

func (s slowReceives) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	s.clock.Advance(s.step)
	return s.Fake.ReceiveMessage(ctx, in, opts...)
}

// A scan that lasts longer than the visibility timeout keeps the messages
// it holds hidden: it reads every message once, never takes held messages
// that come back for the end of the queue, and releases them all.
func TestScanOutlastsVisibility(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	clock := sqstest.NewClock(time.Now())
	e.f.Now = clock.Now
	const n = 600
	e.deadLetterJobs(n)
	q := openOrdersDLQ(t, slowReceives{Fake: e.f, clock: clock, step: time.Second})
	q.now = clock.Now
	// 60 receives of a second each: twice the visibility timeout.
	res, err := q.Scan(context.Background(), ScanConfig{Visibility: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Coverage; res.Scanned != n || c.Seen != n || !c.Complete || c.Shortfall() != "" {
		t.Errorf("scanned %d, %+v, %q", res.Scanned, c, c.Shortfall())
	}
	e.wantDLQDepth(t, "after the scan", n, 0)
	if got := e.f.Calls(sqstest.OpReceiveMessage); got > n/10+2 {
		t.Errorf("%d receives for %d messages: held messages came back", got, n)
	}
}
