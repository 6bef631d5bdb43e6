package lambda_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// slowExtends is a fake whose visibility extensions take a while, and which
// counts, per receipt handle, the extensions sent while another extension of
// the same message was still under way: the double calls of rounds that
// overlap.
type slowExtends struct {
	*sqstest.Fake
	delay time.Duration

	mu       sync.Mutex
	inFlight map[string]int
	calls    map[string]int
	doubled  map[string]int
}

func (s *slowExtends) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	s.mu.Lock()
	for _, e := range in.Entries {
		h := aws.ToString(e.ReceiptHandle)
		s.calls[h]++
		if s.inFlight[h] > 0 {
			s.doubled[h]++
		}
		s.inFlight[h]++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, e := range in.Entries {
			s.inFlight[aws.ToString(e.ReceiptHandle)]--
		}
		s.mu.Unlock()
	}()
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return s.Fake.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

// Concurrent invocations, started one after another so that they join and
// leave while others run, share their queue's visibility extender: its
// rounds run one at a time, so no record is sent a second extension while
// one is under way, and every record is still extended.
func TestConcurrentInvocationsExtendEachRecordOnce(t *testing.T) {
	t.Parallel()
	f := &slowExtends{Fake: newFake("2"), delay: 250 * time.Millisecond,
		inFlight: map[string]int{}, calls: map[string]int{}, doubled: map[string]int{}}
	fn := newHandler(t, jobs, lambda.Config{Client: f, Concurrency: 1})
	const invocations = 4
	evs := make([]events.SQSEvent, invocations)
	var wg sync.WaitGroup
	for i := range evs {
		if i > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		evs[i] = received(t, f.Fake, "orders", "sleep:3s")
		wg.Go(func() {
			resp, err := fn(context.Background(), evs[i])
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Errorf("invocation: %v, failed %v", err, failedIDs(resp))
			}
		})
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range evs {
		h := ev.Records[0].ReceiptHandle
		if f.calls[h] == 0 {
			t.Errorf("record %s: never extended", ev.Records[0].MessageId)
		}
		if f.doubled[h] != 0 {
			t.Errorf("record %s: %d extensions, %d of them sent while another was under way", ev.Records[0].MessageId, f.calls[h], f.doubled[h])
		}
	}
}
