package sqstest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The region and account of every queue of a Fake.
const (
	Region  = "us-east-1"
	Account = "000000000000"
)

// DeduplicationInterval is how long a FIFO queue remembers a message
// deduplication ID.
const DeduplicationInterval = 5 * time.Minute

// QueueURL returns the URL the Fake gives the queue of that name.
func QueueURL(name string) string {
	return "https://sqs." + Region + ".amazonaws.com/" + Account + "/" + name
}

// QueueARN returns the ARN the Fake gives the queue of that name.
func QueueARN(name string) string {
	return "arn:aws:sqs:" + Region + ":" + Account + ":" + name
}

// Names of the operations a Fake implements, for [Fake.FailNext],
// [Fake.LoseReplies], [Fake.FailEntries] and [Fake.Calls].
const (
	OpReceiveMessage               = "ReceiveMessage"
	OpSendMessage                  = "SendMessage"
	OpSendMessageBatch             = "SendMessageBatch"
	OpDeleteMessage                = "DeleteMessage"
	OpDeleteMessageBatch           = "DeleteMessageBatch"
	OpChangeMessageVisibility      = "ChangeMessageVisibility"
	OpChangeMessageVisibilityBatch = "ChangeMessageVisibilityBatch"
	OpGetQueueAttributes           = "GetQueueAttributes"
	OpGetQueueUrl                  = "GetQueueUrl"
)

var operations = map[string]bool{
	OpReceiveMessage: true, OpSendMessage: true, OpSendMessageBatch: true,
	OpDeleteMessage: true, OpDeleteMessageBatch: true,
	OpChangeMessageVisibility: true, OpChangeMessageVisibilityBatch: true,
	OpGetQueueAttributes: true, OpGetQueueUrl: true,
}

var batchOperations = map[string]bool{
	OpSendMessageBatch: true, OpDeleteMessageBatch: true, OpChangeMessageVisibilityBatch: true,
}

// maxPollRecheck bounds how long a long poll sleeps before it looks at the
// queue again, so that it notices time moved by a custom Now.
const maxPollRecheck = 100 * time.Millisecond

// Fake is an in-memory SQS. Create one with NewFake and queues with
// CreateQueue. Its methods are safe for concurrent use.
//
// The SDK-shaped methods (ReceiveMessage, SendMessage, ...) take and return
// the SDK's types, ignore their option functions, and return errors wrapped in
// a *smithy.OperationError, as *sqs.Client does: use errors.As to find the
// modeled error (*types.QueueDoesNotExist, ...) or a smithy.APIError. Each
// call first counts itself (see Calls), then fails if its context is done or
// a failure was injected with FailNext; a call applied may then lose its
// reply (see LoseReplies).
//
// A deleted message is freed: receipt handles are signed by their queue and
// name their message and receive, so the Fake needs no record of a deleted
// message to answer for its handles as before (its latest handle deletes
// again without an error, the others are invalid). It keeps only the receive
// count of a message deleted after more than one receive, and the ordinal of
// one moved to a dead-letter queue, a few bytes each, until the queue is
// deleted. A soak over millions of messages thus measures the code under
// test, not the Fake.
type Fake struct {
	// Now returns the current time. Visibility timeouts, delays, timestamps
	// and the deduplication window are computed from it when a call is
	// made. Default time.Now. Set it before the Fake is used; to move time
	// during a test, point it at a [Clock]. Long polls wait in real time,
	// and look at the queue again at least every 100ms, so they notice a
	// clock moved forward.
	Now func() time.Time

	mu         sync.Mutex
	queues     map[string]*queue // by name
	changed    chan struct{}     // closed and replaced when any queue changes
	calls      map[string]int
	fails      map[string][]*injected
	entryFails map[string][]*injectedEntry
	lose       map[string]int // replies still to lose, by operation
	tasks      []*moveTask    // message move tasks, oldest first
}

type injected struct {
	err error
	n   int
}

type injectedEntry struct {
	code        string
	senderFault bool
	n           int
}

// NewFake returns a Fake without queues.
func NewFake() *Fake {
	return &Fake{
		queues:     map[string]*queue{},
		changed:    make(chan struct{}),
		calls:      map[string]int{},
		fails:      map[string][]*injected{},
		entryFails: map[string][]*injectedEntry{},
		lose:       map[string]int{},
	}
}

func (f *Fake) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// notify wakes the long polls. f.mu is held.
func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

var queueName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// queueAttributes are the attributes CreateQueue and SetAttribute accept.
var queueAttributes = map[string]bool{
	"VisibilityTimeout": true, "DelaySeconds": true, "MaximumMessageSize": true,
	"MessageRetentionPeriod": true, "ReceiveMessageWaitTimeSeconds": true,
	"RedrivePolicy": true, "RedriveAllowPolicy": true, "FifoQueue": true,
	"ContentBasedDeduplication": true, "DeduplicationScope": true,
	"FifoThroughputLimit": true, "Policy": true, "KmsMasterKeyId": true,
	"KmsDataKeyReusePeriodSeconds": true, "SqsManagedSseEnabled": true,
}

// CreateQueue creates a queue and returns its URL (see QueueURL). Names
// ending in ".fifo" make FIFO queues. Supported attributes:
//
//   - VisibilityTimeout (seconds, default 30),
//   - DelaySeconds (default 0), ReceiveMessageWaitTimeSeconds (default 0),
//     MaximumMessageSize (bytes, default 1048576),
//   - RedrivePolicy: JSON with deadLetterTargetArn, the ARN of an existing
//     queue of the Fake, and maxReceiveCount, a number or a string,
//   - FifoQueue ("true" for, and only for, names ending in ".fifo"),
//   - ContentBasedDeduplication ("true" or "false", FIFO queues only).
//
// Other attributes SQS knows are stored and returned but do nothing.
// Creating an existing queue with the same attributes returns its URL.
//
// CreateQueue is for setting up tests: it panics when SQS would refuse the
// queue (a bad name or attribute, attributes different from an existing
// queue's). Use SetAttribute to give a queue attributes SQS would refuse.
func (f *Fake) CreateQueue(name string, attrs map[string]string) (url string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.validateQueue(name, attrs); err != nil {
		panic("sqstest: CreateQueue " + name + ": " + err.Error())
	}
	attrs = maps.Clone(attrs)
	if p, ok := attrs["RedrivePolicy"]; ok { // as SQS returns it
		arn, n, _ := parseRedrivePolicy(p)
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, arn, n)
	}
	if q, ok := f.queues[name]; ok {
		if !maps.Equal(q.attrs, attrs) {
			panic("sqstest: CreateQueue " + name + ": QueueNameExists: a queue of that name exists with other attributes")
		}
		return q.url
	}
	now := f.now()
	q := &queue{
		name: name, url: QueueURL(name), arn: QueueARN(name),
		fifo:    strings.HasSuffix(name, ".fifo"),
		attrs:   attrs,
		created: now, modified: now,
		dedup:    map[string]dedupEntry{},
		key:      newKey(),
		received: map[uint64]*message{},
		gone:     map[uint64]int32{},
		attempts: map[string]*attempt{},
	}
	if q.attrs == nil {
		q.attrs = map[string]string{}
	}
	f.queues[name] = q
	return q.url
}

func (f *Fake) validateQueue(name string, attrs map[string]string) error {
	fifo := strings.HasSuffix(name, ".fifo")
	base := strings.TrimSuffix(name, ".fifo")
	if !queueName.MatchString(base) || len(name) > 80 {
		return fmt.Errorf("invalid queue name %q: up to 80 letters, digits, hyphens and underscores, with .fifo for FIFO queues", name)
	}
	for k, v := range attrs {
		if !queueAttributes[k] {
			return fmt.Errorf("unknown attribute %s", k)
		}
		bad := func() error { return fmt.Errorf("invalid value %q for attribute %s", v, k) }
		switch k {
		case "VisibilityTimeout":
			if !intIn(v, 0, 43200) {
				return bad()
			}
		case "DelaySeconds":
			if !intIn(v, 0, 900) {
				return bad()
			}
		case "ReceiveMessageWaitTimeSeconds":
			if !intIn(v, 0, 20) {
				return bad()
			}
		case "MaximumMessageSize":
			if !intIn(v, 1024, 1048576) {
				return bad()
			}
		case "MessageRetentionPeriod":
			if !intIn(v, 60, 1209600) {
				return bad()
			}
		case "FifoQueue":
			if v != "true" || !fifo {
				return fmt.Errorf("attribute FifoQueue %q: FIFO queues, and only they, have names ending in .fifo and FifoQueue true", v)
			}
		case "ContentBasedDeduplication":
			if (v != "true" && v != "false") || !fifo {
				return bad()
			}
		case "RedrivePolicy":
			arn, _, err := parseRedrivePolicy(v)
			if err != nil {
				return err
			}
			dlq := f.queueByARN(arn)
			if dlq == nil {
				return fmt.Errorf("redrive policy: dead-letter queue %s does not exist", arn)
			}
			if dlq.fifo != fifo {
				return fmt.Errorf("redrive policy: the dead-letter queue of a FIFO queue must be a FIFO queue, and of a standard queue a standard queue")
			}
		}
	}
	if fifo && attrs["FifoQueue"] != "true" {
		return fmt.Errorf("a queue whose name ends in .fifo needs the attribute FifoQueue true")
	}
	return nil
}

func intIn(s string, lo, hi int) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= lo && n <= hi
}

// DeleteQueue deletes a queue and its messages. Calls naming it then fail
// with *types.QueueDoesNotExist. It does nothing when there is no such queue.
func (f *Fake) DeleteQueue(url string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if q := f.queueByURL(url); q != nil {
		delete(f.queues, q.name)
		f.notify()
	}
}

// SetAttribute sets a queue attribute to a raw value, without the checks
// CreateQueue makes, so that tests can give a queue attributes SQS would
// refuse, such as a malformed redrive policy. An empty value removes the
// attribute. A value the Fake cannot read has no effect on its behaviour
// (a malformed RedrivePolicy moves no message; a malformed VisibilityTimeout
// counts as 30) but is returned by GetQueueAttributes as set. It panics when
// there is no such queue.
func (f *Fake) SetAttribute(url, name, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queueByURL(url)
	if q == nil {
		panic("sqstest: SetAttribute: no queue " + url)
	}
	if value == "" {
		delete(q.attrs, name)
	} else {
		q.attrs[name] = value
	}
	q.modified = f.now()
	f.notify()
}

// Send sends a message with body to the queue at url and returns its message
// ID, applying opts to the input first: use them to set a message group, a
// deduplication ID, attributes, a delay. Send is for setting up tests: it is
// neither counted by Calls nor subject to FailNext, and it panics when SQS
// would refuse the message.
func (f *Fake) Send(url, body string, opts ...func(*sqs.SendMessageInput)) (messageID string) {
	in := &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body}
	for _, o := range opts {
		o(in)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out, err := f.sendMessage(in)
	if err != nil {
		panic("sqstest: Send: " + err.Error())
	}
	return *out.MessageId
}

// Depth returns the numbers of visible, in-flight and delayed messages of the
// queue at url, as GetQueueAttributes would. It panics when there is no such
// queue.
func (f *Fake) Depth(url string) (visible, inFlight, delayed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queueByURL(url)
	if q == nil {
		panic("sqstest: Depth: no queue " + url)
	}
	return q.depth(f.now())
}

// FailNext makes the next n calls of operation op (such as "ReceiveMessage",
// see the Op constants) fail with err, which is wrapped in a
// *smithy.OperationError as the SDK wraps errors. To fake an AWS error, pass
// a modeled error such as &types.QueueDoesNotExist{} or a
// &smithy.GenericAPIError{Code: "RequestThrottled"}; to fake a network error,
// any other error. Failures injected earlier for op are used up first.
// n <= 0 removes the failures injected for op. A failed call has no other
// effect. FailNext panics on an unknown operation.
func (f *Fake) FailNext(op string, err error, n int) {
	mustOperation("FailNext", op)
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		delete(f.fails, op)
		return
	}
	f.fails[op] = append(f.fails[op], &injected{err: err, n: n})
}

// LoseReplies makes the next n calls of operation op lose their replies:
// each call is applied as usual (a receive hands out its messages, a delete
// deletes), then returns, instead of its result, the network error the SDK
// returns when the connection breaks while the reply is on its way: a
// *net.OpError (connection reset) in a *smithyhttp.RequestSendError, wrapped
// in a *smithy.OperationError. The caller cannot tell what happened, as with
// a reply lost between SQS and an *sqs.Client once the SDK's retries are
// spent. Calls that fail through FailNext or their context (a long poll its
// caller cut short included) lose no reply. n adds to the replies op still
// has to lose; n <= 0 removes them. LoseReplies panics on an unknown
// operation.
func (f *Fake) LoseReplies(op string, n int) {
	mustOperation("LoseReplies", op)
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		delete(f.lose, op)
		return
	}
	f.lose[op] += n
}

// mustOperation panics, naming the method fn, unless op names an operation
// the Fake implements.
func mustOperation(fn, op string) {
	if !operations[op] {
		panic("sqstest: " + fn + ": unknown operation " + op)
	}
}

// loseReply replaces the result of a call of op that was applied with the
// error of a lost reply, when LoseReplies asked for one. Each operation
// defers it once begin let it through.
func loseReply[T any](f *Fake, op string, out **T, err *error) {
	if canceled := new(smithy.CanceledError); errors.As(*err, &canceled) {
		return // failed through its context (a long poll cut short): no reply to lose
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lose[op] <= 0 {
		return
	}
	if f.lose[op]--; f.lose[op] == 0 {
		delete(f.lose, op)
	}
	*out, *err = nil, opError(op, &smithyhttp.RequestSendError{Err: &net.OpError{
		Op: "read", Net: "tcp", Err: errors.New("connection reset by peer (reply lost by sqstest.Fake.LoseReplies)"),
	}})
}

// FailEntries makes the next n entries of the batch operation op
// ("DeleteMessageBatch", "ChangeMessageVisibilityBatch" or
// "SendMessageBatch") fail with the error code and sender fault given, as
// SQS reports the failure of single entries in a call that succeeds: in the
// output's Failed list. SQS marks with SenderFault true the failures that the
// caller caused and a retry will not fix (such as "ReceiptHandleIsInvalid"),
// and with false its own (such as "InternalError"), which are worth a retry.
// A failed entry has no other effect. Entries are counted across calls, in
// the order of each call's entries. n <= 0 removes the failures injected for
// op. FailEntries panics on an operation that is not a batch operation.
func (f *Fake) FailEntries(op, code string, senderFault bool, n int) {
	if !batchOperations[op] {
		panic("sqstest: FailEntries: not a batch operation: " + op)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		delete(f.entryFails, op)
		return
	}
	f.entryFails[op] = append(f.entryFails[op], &injectedEntry{code: code, senderFault: senderFault, n: n})
}

// Calls returns the number of calls made of operation op, failed ones
// included.
func (f *Fake) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// begin counts a call of op and returns the error it fails with: its
// context's, or an injected one.
func (f *Fake) begin(ctx context.Context, op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	if err := ctx.Err(); err != nil {
		return opError(op, &smithy.CanceledError{Err: err})
	}
	if q := f.fails[op]; len(q) > 0 {
		inj := q[0]
		if inj.n--; inj.n <= 0 {
			f.fails[op] = q[1:]
		}
		return opError(op, inj.err)
	}
	return nil
}

// entryFailure returns the injected failure of the next entry of op, if any.
// f.mu is held.
func (f *Fake) entryFailure(op string) (*injectedEntry, bool) {
	q := f.entryFails[op]
	if len(q) == 0 {
		return nil, false
	}
	inj := q[0]
	if inj.n--; inj.n <= 0 {
		f.entryFails[op] = q[1:]
	}
	return inj, true
}

func opError(op string, err error) error {
	return &smithy.OperationError{ServiceID: "SQS", OperationName: op, Err: err}
}

// queueByURL finds a queue by URL: the URL QueueURL returns, or any URL whose
// path is /ACCOUNT/NAME, as SQS accepts its URLs under other host names.
// f.mu is held.
func (f *Fake) queueByURL(url string) *queue {
	i := strings.LastIndexByte(url, '/')
	if i < 0 {
		return nil
	}
	q := f.queues[url[i+1:]]
	if q == nil || (url != q.url && !strings.HasSuffix(url[:i], "/"+Account)) {
		return nil
	}
	return q
}

// queueByARN finds a queue by ARN. f.mu is held.
func (f *Fake) queueByARN(arn string) *queue {
	for _, q := range f.queues {
		if q.arn == arn {
			return q
		}
	}
	return nil
}

// redrive returns the dead-letter queue and maxReceiveCount of q's redrive
// policy, or nil when it has none that the Fake can read. f.mu is held.
func (f *Fake) redrive(q *queue) (*queue, int) {
	p, ok := q.attrs["RedrivePolicy"]
	if !ok {
		return nil, 0
	}
	arn, n, err := parseRedrivePolicy(p)
	if err != nil {
		return nil, 0
	}
	dlq := f.queueByARN(arn)
	if dlq == nil || dlq == q {
		return nil, 0
	}
	return dlq, n
}

func parseRedrivePolicy(s string) (arn string, maxReceiveCount int, err error) {
	var p struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return "", 0, fmt.Errorf("redrive policy %q is not JSON: %v", s, err)
	}
	n, err := strconv.Atoi(strings.Trim(string(p.MaxReceiveCount), `"`))
	switch {
	case p.DeadLetterTargetArn == "":
		return "", 0, fmt.Errorf("redrive policy %q has no deadLetterTargetArn", s)
	case err != nil || n < 1 || n > 1000:
		return "", 0, fmt.Errorf("redrive policy %q: maxReceiveCount must be a whole number from 1 to 1000", s)
	}
	return p.DeadLetterTargetArn, n, nil
}

// newKey returns a random key that signs the receipt handles of a queue.
func newKey() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// newMessageID returns a random UUID, the form of SQS message IDs.
func newMessageID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
