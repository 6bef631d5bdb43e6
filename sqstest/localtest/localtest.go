// Package localtest connects tests to the local AWS stack started by
// localstack/stack.sh, through the SDK's standard endpoint variables
// (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_DYNAMODB).
//
// It is public so that every module of the project, and users testing their
// own handlers against the same stack, can use it: queues and tables made for
// one test and deleted after it, loopback-only endpoints, fault proxies, the
// Lambda Runtime Interface Emulator. Tests skip without the stack, except in
// CI (CI=true), where they fail.
package localtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// Endpoint returns the SQS endpoint the SDK will use from the environment, or
// "" when none is set.
func Endpoint() string {
	if e := os.Getenv("AWS_ENDPOINT_URL_SQS"); e != "" {
		return e
	}
	return os.Getenv("AWS_ENDPOINT_URL")
}

// Require skips the test when no local SQS endpoint is configured, or fails
// it when running in CI, where the stack must be there. It fails the test
// when the endpoint is not on the loopback interface: tests never send
// traffic elsewhere.
func Require(t testing.TB) {
	t.Helper()
	e := Endpoint()
	if e == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no local SQS endpoint: run the tests with `make test`, which starts the local stack")
		}
		t.Skip("no local SQS endpoint (AWS_ENDPOINT_URL_SQS); run `make test`")
	}
	if !IsLoopback(e) {
		t.Fatalf("endpoint %s is not on the loopback interface; tests only talk to a local stack", e)
	}
}

// IsLoopback reports whether an endpoint URL points to this machine.
func IsLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Counter counts the SQS requests a client makes, by operation.
type Counter struct {
	mu sync.Mutex
	n  map[string]int
}

// Get returns the number of requests made of operation op.
func (c *Counter) Get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// Total returns the number of requests made.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.n {
		t += v
	}
	return t
}

// ByOperation returns a copy of the counts by operation.
func (c *Counter) ByOperation() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// Reset sets all counts to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.n = nil
	c.mu.Unlock()
}

// AddTo installs the counter in the options of an SDK client. It counts
// every attempt, retries included.
func (c *Counter) AddTo(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("sqsworkerCount",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			op := middleware.GetOperationName(ctx)
			c.mu.Lock()
			if c.n == nil {
				c.n = map[string]int{}
			}
			c.n[op]++
			c.mu.Unlock()
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

// NewSQS returns an SQS client configured from the environment, with the
// given options.
func NewSQS(t testing.TB, opts ...func(*sqs.Options)) *sqs.Client {
	t.Helper()
	Require(t)
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatalf("loading AWS config: %v", err)
	}
	return sqs.NewFromConfig(cfg, opts...)
}

// NewCountingSQS returns an SQS client whose requests c counts.
func NewCountingSQS(t testing.TB, c *Counter) *sqs.Client {
	return NewSQS(t, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, c.AddTo) })
}

// QueueOptions shapes the queues NewQueue creates.
type QueueOptions struct {
	FIFO bool
	// MaxReceiveCount adds a dead-letter queue with this maxReceiveCount;
	// 0 for no dead-letter queue.
	MaxReceiveCount int
	// VisibilityTimeout of the queue. Default 30s.
	VisibilityTimeout time.Duration
	// ContentDedup turns on content-based deduplication of FIFO queues.
	ContentDedup bool
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// UniqueName returns a queue name made from the test's name and a random
// suffix, within SQS's 80 characters (".fifo" included).
func UniqueName(t testing.TB, fifo bool) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(name) > 55 {
		name = name[len(name)-55:]
	}
	name = strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
	if fifo {
		name += ".fifo"
	}
	return name
}

// Queue is a queue created for a test.
type Queue struct {
	URL, ARN       string
	DLQURL, DLQARN string
}

// NewQueue creates a queue, and its dead-letter queue when asked, and deletes
// them when the test ends.
func NewQueue(t testing.TB, c *sqs.Client, o QueueOptions) Queue {
	t.Helper()
	ctx := context.Background()
	vis := o.VisibilityTimeout
	if vis == 0 {
		vis = 30 * time.Second
	}
	attrs := func() map[string]string {
		a := map[string]string{"VisibilityTimeout": strconv.Itoa(int(vis / time.Second))}
		if o.FIFO {
			a["FifoQueue"] = "true"
			if o.ContentDedup {
				a["ContentBasedDeduplication"] = "true"
			}
		}
		return a
	}
	create := func(name string, a map[string]string) (string, string) {
		out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: a})
		if err != nil {
			t.Fatalf("creating queue %s: %v", name, err)
		}
		u := aws.ToString(out.QueueUrl)
		t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &u}) })
		ga, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &u, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatalf("reading queue %s: %v", name, err)
		}
		return u, ga.Attributes["QueueArn"]
	}
	var q Queue
	name := UniqueName(t, o.FIFO)
	a := attrs()
	if o.MaxReceiveCount > 0 {
		dlqName := "dlq-" + name
		if len(dlqName) > 80 {
			dlqName = dlqName[len(dlqName)-80:]
		}
		q.DLQURL, q.DLQARN = create(dlqName, attrs())
		a["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, q.DLQARN, o.MaxReceiveCount)
	}
	q.URL, q.ARN = create(name, a)
	return q
}

// Send sends bodies to a queue, in batches of ten, and returns their message
// IDs in order. On FIFO queues every message goes to group.
func Send(t testing.TB, c *sqs.Client, queueURL, group string, bodies ...string) []string {
	t.Helper()
	ids := make([]string, 0, len(bodies))
	for start := 0; start < len(bodies); start += 10 {
		end := min(start+10, len(bodies))
		in := &sqs.SendMessageBatchInput{QueueUrl: &queueURL}
		for i := start; i < end; i++ {
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(bodies[i])}
			if group != "" {
				e.MessageGroupId = aws.String(group)
				e.MessageDeduplicationId = aws.String(fmt.Sprintf("%s-%d-%d", group, i, time.Now().UnixNano()))
			}
			in.Entries = append(in.Entries, e)
		}
		out, err := c.SendMessageBatch(context.Background(), in)
		if err != nil {
			t.Fatalf("sending to %s: %v", queueURL, err)
		}
		if len(out.Failed) > 0 {
			t.Fatalf("sending to %s: %d entries failed: %s", queueURL, len(out.Failed), aws.ToString(out.Failed[0].Message))
		}
		byID := map[string]string{}
		for _, s := range out.Successful {
			byID[aws.ToString(s.Id)] = aws.ToString(s.MessageId)
		}
		for i := start; i < end; i++ {
			ids = append(ids, byID[strconv.Itoa(i)])
		}
	}
	return ids
}

// ReceiveAll receives messages from a queue until none has come for quiet,
// with the given visibility timeout, and returns them. It deletes nothing.
//
// It receives with c's options, its request bodies sent from copies as the
// runtimes' are (internal/sdkhttp): a plain client's receive can have its
// reply cut on a loaded machine, and the SDK then receives again while the
// messages handed out on the cut reply stay hidden for the visibility
// timeout.
func ReceiveAll(t testing.TB, c *sqs.Client, queueURL string, quiet time.Duration, visibility time.Duration) []types.Message {
	t.Helper()
	c = sqs.New(c.Options(), func(o *sqs.Options) { o.HTTPClient = sdkhttp.Wrap(o.HTTPClient) })
	var all []types.Message
	last := time.Now()
	for time.Since(last) < quiet {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: &queueURL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			VisibilityTimeout:           int32(visibility / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			t.Fatalf("receiving from %s: %v", queueURL, err)
		}
		if len(out.Messages) > 0 {
			all = append(all, out.Messages...)
			last = time.Now()
		}
	}
	return all
}

// Depth returns the visible, in-flight and delayed message counts of a
// queue.
func Depth(t testing.TB, c *sqs.Client, queueURL string) (visible, inFlight, delayed int) {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: &queueURL,
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		t.Fatalf("reading depth of %s: %v", queueURL, err)
	}
	visible, _ = strconv.Atoi(out.Attributes["ApproximateNumberOfMessages"])
	inFlight, _ = strconv.Atoi(out.Attributes["ApproximateNumberOfMessagesNotVisible"])
	delayed, _ = strconv.Atoi(out.Attributes["ApproximateNumberOfMessagesDelayed"])
	return visible, inFlight, delayed
}

// Eventually polls cond every 50ms until it holds or timeout passes, then
// fails the test with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
