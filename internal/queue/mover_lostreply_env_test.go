package queue

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// The reply to a dead-letter move lost on the way, on the emulator, with
// the client the runtimes use (sdkhttp.ForSQS): SQS applied the send, the
// SDK sent it again, and a standard dead-letter queue, which does not
// deduplicate, holds two copies of the job. Both carry the same body and
// the same failure metadata (the original message ID, source queue,
// failure time), by which the dead-letter tools (package dlq) tell them
// for copies of one job.
func TestMoverLostReplyCopiesAlike(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	direct := localtest.NewSQS(t)
	dlq := localtest.NewQueue(t, direct, localtest.QueueOptions{}).URL
	proxied := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(p.URL()) })
	mv := testMover(sdkhttp.ForSQS(proxied, 0), dlq)
	if err := p.LoseReplies(1); err != nil {
		t.Fatal(err)
	}
	m := testMessage("job 1")
	if ok, err := mv.Move(t.Context(), m, errBadPayload); err != nil || !ok {
		t.Fatalf("Move = %v, %v", ok, err)
	}
	if n := p.Stats().LostReplies; n != 1 {
		t.Fatalf("%d replies lost, want 1", n)
	}
	raw := localtest.ReceiveAll(t, direct, dlq, 2*time.Second, 30*time.Second)
	t.Logf("one move whose reply was lost left %d copies in the dead-letter queue", len(raw))
	if len(raw) != 2 {
		t.Errorf("%d copies in the dead-letter queue, want 2 (SQS applied the send whose reply was lost, and the SDK's retry)", len(raw))
	}
	for i := range raw {
		got := sqsmsg.FromSDK(dlq, &raw[i])
		f, ok := sqsworker.ParseFailure(got.MessageAttributes)
		if got.Body != m.Body || !ok || f.MessageID != m.ID || f.SourceQueue != m.QueueURL || !f.FailedAt.Equal(testFailedAt) {
			t.Errorf("copy %d: body %q, metadata %+v (%v); want the job's body, and metadata naming message %s of %s",
				i, got.Body, f, ok, m.ID, m.QueueURL)
		}
	}
}
