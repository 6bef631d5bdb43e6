package visibility_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/visibility"
)

// BenchmarkHeartbeat1000 keeps 1,000 long jobs in flight for 12s with a 4s
// visibility timeout (defaults: extend 2s before the end, every 667ms) and
// reports the ChangeMessageVisibilityBatch calls per in-flight message per
// minute, the minimum for the extensions made (one call per ten), and their
// ratio. The jobs arrive over the first second, ten per receive, as they
// would from a busy queue. The extensions themselves scale with
// 1/visibility timeout; the ratio does not. Run with
// `go test -run '^$' -bench Heartbeat1000 -benchtime 1x ./visibility`.
func BenchmarkHeartbeat1000(b *testing.B) {
	const jobs, vis, span = 1000, 4 * time.Second, 12 * time.Second
	for range b.N {
		f := sqstest.NewFake()
		url := f.CreateQueue("bench", nil)
		e, err := visibility.New(f, visibility.Config{QueueURL: url, VisibilityTimeout: vis, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = e.Run(ctx) })
		var leases []*visibility.Lease
		for range jobs / 10 {
			for range 10 {
				f.Send(url, "job")
			}
			out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: int32(vis / time.Second)})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			for i := range out.Messages {
				_, l := e.Track(ctx, sqsmsg.FromSDK(url, &out.Messages[i]), now)
				leases = append(leases, l)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(span - time.Second)
		cancel()
		wg.Wait()
		for _, l := range leases {
			l.Release()
		}
		s := e.Stats()
		if s.Lost != 0 {
			b.Fatalf("%d leases lost", s.Lost)
		}
		perMin := float64(time.Minute) / float64(span) / jobs
		minCalls := float64(s.Extended) / 10
		b.ReportMetric(float64(s.Calls)*perMin, "calls/msg/min")
		b.ReportMetric(minCalls*perMin, "min-calls/msg/min")
		b.ReportMetric(float64(s.Calls)/minCalls, "calls/min-calls")
		b.ReportMetric(float64(s.Extended)*perMin, "extensions/msg/min")
	}
}
