package batch

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/jobkey"
	"github.com/sqsworker/sqsworker/internal/queue"
)

// The completion's sender on its last receive.
//
// The chunk that sends a batch's completion keeps its message until the
// send is marked, so that a crash in between redelivers it. On the last
// receive the queue's redrive policy allows there is no redelivery: SQS
// moves the message to the dead-letter queue on its next receive, a chunk
// that did not fail, and the completion is never sent. Such a chunk is
// postponed instead, which the runtime carries out with a fresh copy of its
// message (see notify).

// limitsCache caches what the completion's sender on its last receive
// reads of the chunks' queues: their maxReceiveCount and
// MaximumMessageSize. It holds an entry per queue.
type limitsCache struct {
	mu sync.Mutex
	q  map[string]limitsRead // by queue URL
}

// limitsRead is a queue's limits as read, or, after a read that failed,
// when to read them again.
type limitsRead struct {
	queueLimits
	retryAt time.Time // zero: read
}

// limitsReadTimeout bounds a read of a chunks' queue's attributes, and
// limitsRetryAfter is how long a read that failed is not tried again.
const (
	limitsReadTimeout = 10 * time.Second
	limitsRetryAfter  = time.Minute
)

// queueLimits are a chunks' queue's maxReceiveCount (0: no redrive policy,
// or unknown) and MaximumMessageSize (0: unknown).
type queueLimits struct{ maxReceive, maxSize int }

// unknownMaxSize is the size copyRoom counts against when the queue's
// MaximumMessageSize could not be read: SQS's default before 2025, which
// queues made before then kept. Counting against less than the queue's
// own only takes the longer, safe way.
const unknownMaxSize = 256 << 10

// lastReceive reports whether m, a chunk's message, is on the last receive
// its queue's redrive policy allows: Config.MaxReceiveCount when set, else
// the queue's redrive policy, read once. When neither is known it reports
// false; with a maxReceiveCount of 1 too: every receive is the last, a
// copy's as well, and handing off would go on for ever. A receive past
// the count reports false: SQS would have moved the message instead, so
// no redrive policy acts at that count (the runtime dead-letters, failures
// only, as Config.MaxReceiveCount allows), and the runtime makes no copy
// of a chunk put off there: it would come back, put off again, for ever.
func (c *Coordinator) lastReceive(ctx context.Context, m *sqsworker.Message) bool {
	n, err := strconv.Atoi(m.Attributes[sqsworker.AttrReceiveCount])
	if err != nil {
		n = m.ReceiveCount
	}
	mrc := c.maxReceive(ctx, m.QueueURL, true)
	return mrc > 1 && n == mrc
}

// maxReceive is the receive after which a chunk of the queue at url is
// dead-lettered: Config.MaxReceiveCount, unless the queue's redrive policy
// (read once) moves the message sooner, as SQS does at its count whatever
// Config says (limits logs that mistake). Unset, it is the redrive
// policy's count when orPolicy, and 0 otherwise. 0: unknown.
func (c *Coordinator) maxReceive(ctx context.Context, url string, orPolicy bool) int {
	mrc := c.cfg.MaxReceiveCount
	if mrc == 0 && !orPolicy {
		return 0
	}
	// Read even when ctx has ended: the failure of a handler cut short by
	// its timeout is recorded, or not, by this count (limits bounds it).
	if p := c.limits(context.WithoutCancel(ctx), url).maxReceive; p > 0 && (mrc == 0 || p < mrc) {
		return p
	}
	return mrc
}

// limits returns what the queue at url allows, read once, within
// limitsReadTimeout (a read that failed is tried again limitsRetryAfter
// later; meanwhile nothing is known).
func (c *Coordinator) limits(ctx context.Context, url string) queueLimits {
	api, ok := c.sqs.(queueAttributesAPI)
	if !ok || url == "" {
		return queueLimits{}
	}
	c.queues.mu.Lock()
	r, known := c.queues.q[url]
	c.queues.mu.Unlock()
	if known && (r.retryAt.IsZero() || c.now().Before(r.retryAt)) {
		return r.queueLimits
	}
	rctx, cancel := context.WithTimeout(ctx, limitsReadTimeout)
	defer cancel()
	out, err := api.GetQueueAttributes(rctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameRedrivePolicy, sqstypes.QueueAttributeNameMaximumMessageSize},
	}, c.sqsOpts...)
	if err != nil {
		fix := "set Config.MaxReceiveCount, and grant the role sqs:GetQueueAttributes on the queue"
		if c.cfg.MaxReceiveCount > 0 {
			fix = "grant the role sqs:GetQueueAttributes on the queue"
		}
		c.cfg.Logger.Warn("batch: reading the redrive policy and the MaximumMessageSize of the chunks' queue failed (tried again in a minute): "+fix,
			"queue", url, "error", err)
		if ctx.Err() == nil {
			c.queues.store(url, limitsRead{retryAt: c.now().Add(limitsRetryAfter)})
		}
		return queueLimits{}
	}
	var l queueLimits
	if rp := out.Attributes[string(sqstypes.QueueAttributeNameRedrivePolicy)]; rp != "" {
		if _, n, err := queue.ParseRedrivePolicy(rp); err == nil {
			l.maxReceive = n
		}
		if mrc := c.cfg.MaxReceiveCount; l.maxReceive > 0 && mrc > l.maxReceive {
			c.cfg.Logger.Error("batch: Config.MaxReceiveCount is above the maxReceiveCount of the chunks' queue's redrive policy: SQS dead-letters a chunk after the policy's count, so a chunk is recorded failed, and the completing chunk handed off, at that count; set Config.MaxReceiveCount to the policy's count, or leave it unset",
				"queue", url, "max_receive_count", mrc, "redrive_max_receive_count", l.maxReceive)
		}
	}
	if n, err := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameMaximumMessageSize)]); err == nil && n > 0 {
		l.maxSize = n
	}
	c.queues.store(url, limitsRead{queueLimits: l})
	return l
}

// store records r as what is known of the queue at url.
func (lc *limitsCache) store(url string, r limitsRead) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.q == nil {
		lc.q = map[string]limitsRead{}
	}
	lc.q[url] = r
}

// copyRoom reports whether the runtime's copy of m, a chunk postponed on
// its last receive, has room for its prior attempts
// (sqsworker.AttrPriorAttempts) within SQS's limits, its job key kept. The
// runtime drops them when it has not, to send the copy all the same, which
// would then look like a chunk's first delivery: it would run the chunk's
// handler again rather than find the chunk counted. Without room, the
// chunk sends the completion itself. It counts the chunk's attributes one
// by one, as if the runtime could not pack them into one
// (sqsworker.AttrPackedAttributes), which may make the room it says is
// not there: a chunk of many attributes then takes the longer, safe way.
// maxSize is the queue's MaximumMessageSize (0: unknown, counted as
// unknownMaxSize).
func copyRoom(m *sqsworker.Message, maxSize int) bool {
	if maxSize <= 0 {
		maxSize = unknownMaxSize
	}
	attrs := make(map[string]sqsworker.MessageAttribute, len(m.MessageAttributes)+2)
	for name, v := range m.MessageAttributes {
		if !sqsworker.IsFailureAttribute(name) && name != sqsworker.AttrNotBefore {
			attrs[name] = v
		}
	}
	attrs[sqsworker.AttrPriorAttempts] = sqsworker.MessageAttribute{DataType: "Number", StringValue: strconv.Itoa(max(m.ReceiveCount, 1))}
	if _, ok := attrs[jobkey.Attribute]; !ok {
		attrs[jobkey.Attribute] = sqsworker.MessageAttribute{DataType: "String", StringValue: jobkey.Default(m)}
	}
	return len(attrs) <= sqsworker.MaxMessageAttributes && sqsworker.MessageSize(m.Body, attrs) <= min(maxSize, sqsworker.MaxMessageSize)
}
