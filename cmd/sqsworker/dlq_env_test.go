package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// classError is a handler error with an error class of its own.
type classError struct{ class, text string }

func (e classError) Error() string      { return e.text }
func (e classError) ErrorClass() string { return e.class }

// job is a message a test sends through the real worker to its dead-letter
// queue.
type job struct {
	body  string
	attrs map[string]string
	group string // FIFO queues
	// fail is the handler's error: classError values are retried until the
	// redrive policy's limit, unless permanent is set.
	fail      error
	permanent bool
}

// deadLetterer runs the real worker on a queue, with a handler that fails
// every message the way its job says, until a test stops it.
type deadLetterer struct {
	t    *testing.T
	c    *sqs.Client
	q    localtest.Queue
	w    *worker.Worker
	done chan error

	mu   sync.Mutex
	jobs map[string]job // by body
	ids  map[string]string
}

func init() {
	// The local stack has no STS: the audit records the caller as unknown,
	// with a note, unless a test says who it is.
	callerIdentity = func(context.Context, *app) (string, error) {
		return "", errors.New("no STS in the local stack")
	}
}

var noBackoff = sqsworker.ExponentialBackoff{Jitter: func() float64 { return 0 }}

func startDeadLetterer(t *testing.T, c *sqs.Client, q localtest.Queue) *deadLetterer {
	t.Helper()
	d := &deadLetterer{t: t, c: c, q: q, done: make(chan error, 1), jobs: map[string]job{}, ids: map[string]string{}}
	w, err := worker.New(c, worker.Config{
		QueueURL: q.URL, WaitTime: pollWait, Backoff: noBackoff, Host: "test-host",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	d.w = w
	go func() {
		d.done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			d.mu.Lock()
			j, ok := d.jobs[m.Body]
			d.mu.Unlock()
			switch {
			case !ok || j.fail == nil:
				return nil
			case j.permanent:
				return sqsworker.Permanent(j.fail)
			}
			return j.fail
		}))
	}()
	t.Cleanup(d.stop)
	return d
}

// send sends jobs to the queue and returns their message IDs.
func (d *deadLetterer) send(jobs ...job) []string {
	d.t.Helper()
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		d.mu.Lock()
		d.jobs[j.body] = j
		d.mu.Unlock()
		in := &sqs.SendMessageInput{QueueUrl: aws.String(d.q.URL), MessageBody: aws.String(j.body)}
		if len(j.attrs) > 0 {
			in.MessageAttributes = map[string]types.MessageAttributeValue{}
			for k, v := range j.attrs {
				in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
			}
		}
		if j.group != "" {
			in.MessageGroupId = aws.String(j.group)
			in.MessageDeduplicationId = aws.String(fmt.Sprintf("%s-%d", j.body, time.Now().UnixNano()))
		}
		out, err := d.c.SendMessage(context.Background(), in)
		if err != nil {
			d.t.Fatalf("sending %q: %v", j.body, err)
		}
		ids[i] = aws.ToString(out.MessageId)
		d.mu.Lock()
		d.ids[j.body] = ids[i]
		d.mu.Unlock()
	}
	return ids
}

// waitDeadLettered waits until the worker has dead-lettered n messages in
// all.
func (d *deadLetterer) waitDeadLettered(n int) {
	d.t.Helper()
	localtest.Eventually(d.t, 60*time.Second, func() bool { return d.w.Stats().DeadLettered >= int64(n) },
		"the worker dead-lettered %d of %d messages", d.w.Stats().DeadLettered, n)
}

// stop shuts the worker down: the dead-letter queue then changes no more.
func (d *deadLetterer) stop() {
	if d.w == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = d.w.Shutdown(ctx)
	select {
	case err := <-d.done:
		if err != nil {
			d.t.Errorf("worker: %v", err)
		}
	case <-time.After(30 * time.Second):
		d.t.Error("worker did not stop")
	}
	d.w = nil
	// The shutdown abandons the worker's long poll, but the emulator
	// still hands a message sent meanwhile to it, hidden for the
	// visibility timeout: wait until that poll is over before the test
	// sends to the queue (its replays).
	time.Sleep(pollWait + 500*time.Millisecond)
}

// pollWait is the worker's long-poll time in these tests.
const pollWait = time.Second

// newDLQ returns a queue with a dead-letter queue (after 2 receives unless
// o says otherwise) filled by the real worker with jobs, then stopped; with
// no jobs, the dead-letter queue is empty and no worker runs.
func newDLQ(t *testing.T, o localtest.QueueOptions, jobs ...job) (*sqs.Client, localtest.Queue, map[string]string) {
	t.Helper()
	c := localtest.NewSQS(t)
	if o.MaxReceiveCount == 0 {
		o.MaxReceiveCount = 2
	}
	q := localtest.NewQueue(t, c, o)
	if len(jobs) == 0 {
		return c, q, nil
	}
	d := startDeadLetterer(t, c, q)
	d.send(jobs...)
	d.waitDeadLettered(len(jobs))
	d.stop()
	waitVisible(t, c, q.DLQURL, len(jobs))
	return c, q, d.ids
}

// sendDeadLettered sends a message with body and attrs, and f's failure
// metadata, to dlqURL, as the runtime dead-letters a job after its last
// receive.
func sendDeadLettered(t *testing.T, c *sqs.Client, dlqURL, body string, f sqsworker.Failure, attrs map[string]sqsworker.MessageAttribute) {
	t.Helper()
	attrs, ok := f.AddTo(attrs)
	if !ok {
		t.Fatalf("the failure metadata %+v does not fit in the attributes", f)
	}
	sdk := map[string]types.MessageAttributeValue{}
	for k, v := range attrs {
		sdk[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
	}
	if _, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(dlqURL), MessageBody: aws.String(body), MessageAttributes: sdk}); err != nil {
		t.Fatal(err)
	}
}

// waitVisible waits until a queue holds exactly n visible messages and none
// in flight.
func waitVisible(t *testing.T, c *sqs.Client, url string, n int) {
	t.Helper()
	localtest.Eventually(t, 30*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, url)
		return v == n && f == 0 && d == 0
	}, "queue %s does not hold exactly %d visible messages", queueName(url), n)
}

// receivedMsg is a message received from a queue, with the attributes a
// test checks.
type receivedMsg struct {
	id, body string
	attrs    map[string]sqsworker.MessageAttribute
	failure  sqsworker.Failure
	group    string
}

// drain receives every message of a queue and deletes it: one at a time
// (the order of a FIFO queue's messages is kept; the emulator hands out one
// message per group per receive), until none has come for quiet.
func drain(t *testing.T, c *sqs.Client, url string, quiet time.Duration) []receivedMsg {
	t.Helper()
	return drainVisibility(t, c, url, quiet, 0, 60)
}

// drainAtLeast is drain, waiting up to a minute for at least n messages,
// its receives hiding each message for 5 s only: a receive whose reply is
// lost (seen with a 1 MiB message on a loaded machine: the emulator had
// taken the message, the client never read it) hides its message for the
// receive's visibility timeout, and a later receive gets it.
func drainAtLeast(t *testing.T, c *sqs.Client, url string, n int) []receivedMsg {
	t.Helper()
	return drainVisibility(t, c, url, time.Second, n, 5)
}

// drainVisibility is drain, whose receives hide each message for vis
// seconds, and which goes on for up to a minute while it has fewer than
// least messages.
func drainVisibility(t *testing.T, c *sqs.Client, url string, quiet time.Duration, least int, vis int32) []receivedMsg {
	t.Helper()
	var all []receivedMsg
	start := time.Now()
	last := start
	for time.Since(last) < quiet || (len(all) < least && time.Since(start) < time.Minute) {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 1, VisibilityTimeout: vis,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("receiving from %s: %v", url, err)
		}
		for _, m := range out.Messages {
			attrs := map[string]sqsworker.MessageAttribute{}
			for k, v := range m.MessageAttributes {
				attrs[k] = sqsworker.MessageAttribute{DataType: aws.ToString(v.DataType), StringValue: aws.ToString(v.StringValue), BinaryValue: v.BinaryValue}
			}
			f, _ := sqsworker.ParseFailure(attrs)
			all = append(all, receivedMsg{id: aws.ToString(m.MessageId), body: aws.ToString(m.Body), attrs: attrs, failure: f, group: m.Attributes[sqsworker.AttrMessageGroupID]})
			if _, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
			last = time.Now()
		}
	}
	return all
}

// bodies returns the sorted bodies of messages.
func bodies(ms []receivedMsg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.body
	}
	sort.Strings(out)
	return out
}

// replayJSON runs a replay with -o json and returns its result.
func replayJSON(t *testing.T, args ...string) (replayResult, string) {
	t.Helper()
	stdout, stderr, code := runCLI(t, "", append([]string{"-o", "json", "dlq", "replay"}, args...)...)
	if code != 0 {
		t.Fatalf("dlq replay %v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
	}
	var res replayResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("dlq replay %v: %v\n%s", args, err, stdout)
	}
	return res, stderr
}

var (
	uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timeRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
)

// normalize makes command output comparable from run to run: queue URLs and
// names become <dlq-url>, <source-url>, <dlq> and <source>, message IDs
// <id-N> in order of first appearance, RFC 3339 times <time>. The replaced
// values have the same length in every run, so the layout of a table does
// not change; with pad the placeholders are padded to that length, so that
// its columns stay aligned.
func normalize(s string, q localtest.Queue, pad bool) string {
	ph := func(orig, p string) string {
		if pad && len(p) < len(orig) {
			return p + strings.Repeat(" ", len(orig)-len(p))
		}
		return p
	}
	for _, r := range []struct{ from, to string }{
		{q.DLQURL, "<dlq-url>"}, {q.URL, "<source-url>"},
		{queueName(q.DLQURL), "<dlq>"}, {queueName(q.URL), "<source>"},
	} {
		s = strings.ReplaceAll(s, r.from, ph(r.from, r.to))
	}
	ids := map[string]string{}
	s = uuidRE.ReplaceAllStringFunc(s, func(id string) string {
		if _, ok := ids[id]; !ok {
			ids[id] = fmt.Sprintf("<id-%d>", len(ids)+1)
		}
		return ph(id, ids[id])
	})
	return timeRE.ReplaceAllStringFunc(s, func(t string) string { return ph(t, "<time>") })
}

// passOn sends an SQS call a test proxy received, whose body it has read,
// on to the local endpoint under ctx; with keepHost, under the Host the
// client sent.
func passOn(ctx context.Context, r *http.Request, body []byte, keepHost bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, r.Method, localtest.Endpoint()+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	if keepHost {
		req.Host = r.Host
	}
	return http.DefaultClient.Do(req)
}

// answer writes the local endpoint's answer (passOn's results) to a test
// proxy's client, a 502 if there was none, and closes its body.
func answer(w http.ResponseWriter, resp *http.Response, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	maps.Copy(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
