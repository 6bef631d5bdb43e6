package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// maxListedQueues bounds the queues whose redrive policy [Open] reads to
// find the sources of a dead-letter queue where ListDeadLetterSourceQueues is
// not available. Beyond it the sources are unknown, and each source queue a
// message names is checked when it is needed.
const maxListedQueues = 1000

// Config is how [Open] opens a dead-letter queue. The zero value is the
// default.
type Config struct {
	// Force opens a queue even when it does not look like a dead-letter
	// queue (it has a redrive policy of its own, or no queue names it as its
	// dead-letter queue), or when that cannot be checked. The checks still
	// run: [Queue.Notes] says what they found. Default false: such a queue
	// is refused with a [*NotDeadLetterError], before any message is
	// received from it. Force also lets [Queue.Target] take a destination
	// that is a dead-letter queue.
	Force bool
	// Logger receives what the package notes on the way (a fallback used, a
	// receive whose response was lost), never a message body. Default: no
	// logging.
	Logger *slog.Logger
}

// SourceCheck says how [Open] found the source queues of a dead-letter
// queue.
type SourceCheck int

const (
	// SourcesUnknown: the endpoint or the client had no way to list them.
	// A source queue that a message names is then trusted only if its own
	// redrive policy names the dead-letter queue (GetQueueAttributes).
	SourcesUnknown SourceCheck = iota
	// SourcesListed: from sqs:ListDeadLetterSourceQueues.
	SourcesListed
	// SourcesFound: from the redrive policies of the queues sqs:ListQueues
	// lists, where ListDeadLetterSourceQueues is not available.
	SourcesFound
)

// String names the check.
func (s SourceCheck) String() string {
	switch s {
	case SourcesListed:
		return "ListDeadLetterSourceQueues"
	case SourcesFound:
		return "redrive policies of the listed queues"
	}
	return "unknown"
}

// Queue is an opened dead-letter queue. Its fields describe it as [Open]
// found it; its methods scan, replay, redrive and purge it. A Queue is safe
// for concurrent use, but its operations each hold messages of the queue:
// run one at a time.
type Queue struct {
	// URL, ARN and Name identify the queue.
	URL, ARN, Name string
	// FIFO is true for a FIFO queue.
	FIFO bool
	// Sources are the URLs of the queues whose redrive policy names this
	// queue, found as SourcesFrom says; nil when SourcesFrom is
	// SourcesUnknown.
	Sources []string
	// SourcesFrom says how Sources were found.
	SourcesFrom SourceCheck
	// RedrivePolicy is the queue's own redrive policy: nil for a
	// dead-letter queue, set only when [Config.Force] opened a queue that
	// has one.
	RedrivePolicy *RedrivePolicy
	// Notes say what [Open] could not check, or what Force overrode, one
	// sentence each.
	Notes []string

	api  API
	opts []func(*sqs.Options) // given to every call of api: sdkhttp.SQSOptions
	log  *slog.Logger
	now  func() time.Time // the clock of scans: time.Now, a fake's in tests
	// moveTimeout bounds each step of a replay's move that runs to its
	// end when the replay is interrupted: moveTimeout, shorter in tests.
	moveTimeout time.Duration

	force  bool                // Config.Force
	listed map[string][]string // by dead-letter queue ARN, the other sources ListQueues found

	mu      sync.Mutex
	targets map[string]targetEntry // checked source queues, by key
}

type targetEntry struct {
	t      Target
	reason string // why it is not a source of this queue; empty if it is
}

// Target is a queue that messages can be sent to.
type Target struct {
	// URL, ARN and Name identify the queue.
	URL, ARN, Name string
	// FIFO is true for a FIFO queue.
	FIFO bool
}

// RedrivePolicy is a queue's RedrivePolicy attribute.
type RedrivePolicy struct {
	// DeadLetterTargetARN is the ARN of the dead-letter queue.
	DeadLetterTargetARN string
	// MaxReceiveCount is the number of receives after which SQS moves a
	// message to the dead-letter queue.
	MaxReceiveCount int
}

// ParseRedrivePolicy reads a queue's RedrivePolicy attribute, whose
// maxReceiveCount SQS writes as a number or a string.
func ParseRedrivePolicy(s string) (RedrivePolicy, error) {
	arn, n, err := queue.ParseRedrivePolicy(s)
	if err != nil {
		return RedrivePolicy{}, err
	}
	return RedrivePolicy{DeadLetterTargetARN: arn, MaxReceiveCount: n}, nil
}

// ARN is an SQS queue ARN: arn:PARTITION:sqs:REGION:ACCOUNT:NAME.
type ARN struct {
	// Partition is aws, aws-cn, aws-us-gov...
	Partition string
	// Region is the queue's region, such as eu-west-1.
	Region string
	// Account is the ID of the account that owns the queue.
	Account string
	// Name is the queue's name.
	Name string
}

// ParseARN reads an SQS queue ARN.
func ParseARN(s string) (ARN, error) {
	name, account, err := queue.ParseARN(s)
	if err != nil {
		return ARN{}, err
	}
	parts := strings.Split(s, ":")
	return ARN{Partition: parts[1], Region: parts[3], Account: account, Name: name}, nil
}

// String formats the ARN.
func (a ARN) String() string {
	return "arn:" + a.Partition + ":sqs:" + a.Region + ":" + a.Account + ":" + a.Name
}

// Open opens the dead-letter queue given by name, URL or ARN, after
// checking that it is one: a queue with a redrive policy of its own is a
// source queue, and a queue that no queue names as its dead-letter queue
// (ListDeadLetterSourceQueues, or where the endpoint lacks it the redrive
// policies of the queues ListQueues lists) is not a dead-letter queue
// either. Either is refused with a [*NotDeadLetterError] unless cfg.Force
// is set; nothing is received from the queue before. A queue that does not
// exist is a [*QueueMissingError].
func Open(ctx context.Context, api API, nameOrURL string, cfg Config) (*Queue, error) {
	if api == nil {
		return nil, errors.New("dlq: Open: nil API")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := sdkhttp.SQSOptions(api)
	u, err := resolveURL(ctx, api, opts, nameOrURL)
	if err != nil {
		return nil, err
	}
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(u),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameQueueArn, types.QueueAttributeNameFifoQueue, types.QueueAttributeNameRedrivePolicy,
		},
	}, opts...)
	if err != nil {
		if IsQueueMissing(err) {
			return nil, &QueueMissingError{Queue: nameOrURL, Err: err}
		}
		return nil, fmt.Errorf("dlq: reading the attributes of queue %s: %w", nameOrURL, err)
	}
	a := out.Attributes
	if err := sameARN(nameOrURL, a["QueueArn"]); err != nil {
		return nil, err
	}
	q := &Queue{
		URL: u, ARN: a["QueueArn"], Name: queueName(u),
		FIFO: a["FifoQueue"] == "true" || queue.IsFIFOURL(u),
		api:  api, opts: opts, log: log, now: time.Now, moveTimeout: moveTimeout, targets: map[string]targetEntry{}, force: cfg.Force,
	}
	var ownDLQ string // the name of the queue's own dead-letter queue
	refuse := func(reason string) error {
		if !cfg.Force {
			return &NotDeadLetterError{Queue: u, Reason: reason, DeadLetterQueue: ownDLQ}
		}
		q.Notes = append(q.Notes, "opened with force although "+reason)
		log.Warn("dlq: opened with force a queue that does not look like a dead-letter queue", "queue", u, "reason", reason)
		return nil
	}
	if rp := a["RedrivePolicy"]; rp != "" {
		p, err := ParseRedrivePolicy(rp)
		if err != nil {
			return nil, fmt.Errorf("dlq: queue %s: %w", q.Name, err)
		}
		q.RedrivePolicy = &p
		target := p.DeadLetterTargetARN
		if arn, err := ParseARN(target); err == nil {
			target = arn.Name
		}
		ownDLQ = target
		if err := refuse(fmt.Sprintf("it has a redrive policy of its own (its messages go to %s after %d receives): it is a source queue", target, p.MaxReceiveCount)); err != nil {
			return nil, err
		}
	}
	if err := q.findSources(ctx); err != nil {
		if !cfg.Force {
			return nil, fmt.Errorf("dlq: cannot tell whether %s is a dead-letter queue, %w: %w", q.Name, ErrCannotCheck, err)
		}
		q.Notes = append(q.Notes, fmt.Sprintf("opened with force although its sources could not be listed: %v", err))
	} else if q.SourcesFrom != SourcesUnknown && len(q.Sources) == 0 {
		if err := refuse(fmt.Sprintf("no queue names it as its dead-letter queue (%s)", q.SourcesFrom)); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// ErrOtherRegion is matched by the error of a queue given by an ARN of
// another region, partition or account than the queue the client reached
// by its name.
var ErrOtherRegion = errors.New("the queue's ARN is not that of the queue reached")

// sameARN checks that the queue given as nameOrURL, when an ARN, is the
// queue read, whose ARN is got: GetQueueUrl finds a queue by its name and
// account in the client's region, so that an ARN of another region would
// open the queue of the same name in this one.
func sameARN(nameOrURL, got string) error {
	if !strings.HasPrefix(nameOrURL, "arn:") || got == "" || nameOrURL == got {
		return nil
	}
	want, err := ParseARN(nameOrURL)
	if err != nil {
		return err
	}
	fix := "give the client that region (--region " + want.Region + ", or AWS_REGION)"
	if have, err := ParseARN(got); err == nil && have.Region == want.Region {
		fix = "check the ARN's partition and account"
	}
	return fmt.Errorf("dlq: %s is a queue of region %s, account %s, but the client reached %s: %s: %w", nameOrURL, want.Region, want.Account, got, fix, ErrOtherRegion)
}

// resolveURL turns a queue name, URL or ARN into its URL, without the
// trailing slash a URL copied from a console may have.
func resolveURL(ctx context.Context, api API, opts []func(*sqs.Options), nameOrURL string) (string, error) {
	u, err := queue.URLOf(ctx, api, nameOrURL, opts...)
	switch {
	case err == nil:
		return u, nil
	case IsQueueMissing(err):
		return "", &QueueMissingError{Queue: nameOrURL, Err: err}
	}
	return "", fmt.Errorf("dlq: queue %s: %w", nameOrURL, err)
}

// findSources fills Sources and SourcesFrom: from ListDeadLetterSourceQueues,
// else from the redrive policies of the queues ListQueues lists, else
// unknown, with a note for each fallback.
func (q *Queue) findSources(ctx context.Context) error {
	if sl, ok := q.api.(SourceLister); ok {
		var srcs []string
		in := &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(q.URL), MaxResults: aws.Int32(1000)}
		for {
			out, err := sl.ListDeadLetterSourceQueues(ctx, in, q.opts...)
			if err != nil {
				if u := unsupported("ListDeadLetterSourceQueues", "", err); u != nil {
					q.note("%v; the sources are found from the redrive policies of the queues ListQueues lists instead", u)
					return q.findSourcesByListing(ctx)
				}
				return fmt.Errorf("ListDeadLetterSourceQueues: %w", err)
			}
			srcs = append(srcs, out.QueueUrls...)
			if aws.ToString(out.NextToken) == "" {
				break
			}
			in.NextToken = out.NextToken
		}
		q.Sources, q.SourcesFrom = srcs, SourcesListed
		return nil
	}
	q.note("the SQS client does not implement ListDeadLetterSourceQueues; the sources are found from the redrive policies of the queues ListQueues lists instead")
	return q.findSourcesByListing(ctx)
}

func (q *Queue) findSourcesByListing(ctx context.Context) error {
	ql, ok := q.api.(QueueLister)
	if !ok {
		q.note("the SQS client does not implement ListQueues either: the sources of %s are unknown, and a source queue a message names is trusted only if its redrive policy names %s", q.Name, q.Name)
		return nil
	}
	var urls []string
	in := &sqs.ListQueuesInput{MaxResults: aws.Int32(1000)}
	for {
		out, err := ql.ListQueues(ctx, in, q.opts...)
		if err != nil {
			if u := unsupported("ListQueues", "", err); u != nil {
				q.note("%v: the sources of %s are unknown, and a source queue a message names is trusted only if its redrive policy names %s", u, q.Name, q.Name)
				return nil
			}
			return fmt.Errorf("ListQueues: %w", err)
		}
		urls = append(urls, out.QueueUrls...)
		if len(urls) > maxListedQueues {
			q.note("more than %d queues: their redrive policies were not read, the sources of %s are unknown, and a source queue a message names is trusted only if its redrive policy names %s", maxListedQueues, q.Name, q.Name)
			return nil
		}
		if aws.ToString(out.NextToken) == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	var srcs []string
	q.listed = map[string][]string{}
	for _, u := range urls {
		if u == q.URL {
			continue
		}
		target, err := q.redriveTargetOf(ctx, u)
		switch {
		case IsQueueMissing(err):
			continue // deleted since it was listed
		case err != nil:
			return err
		case target == "":
		case target == q.ARN:
			srcs = append(srcs, u)
		default:
			q.listed[target] = append(q.listed[target], u)
		}
	}
	q.Sources, q.SourcesFrom = srcs, SourcesFound
	return nil
}

// redriveTargetOf returns the ARN of the dead-letter queue that the redrive
// policy of the queue at u names, "" for none.
func (q *Queue) redriveTargetOf(ctx context.Context, u string) (string, error) {
	out, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(u), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy},
	}, q.opts...)
	if err != nil {
		return "", fmt.Errorf("reading the redrive policy of %s: %w", queueName(u), err)
	}
	rp := out.Attributes["RedrivePolicy"]
	if rp == "" {
		return "", nil
	}
	p, err := ParseRedrivePolicy(rp)
	if err != nil {
		return "", nil
	}
	return p.DeadLetterTargetARN, nil
}

// deadLetterSources returns the queues that send their dead letters to t,
// where Open could list them: none for a queue that is not a dead-letter
// queue, or when they cannot be known (a listing that fails is logged and
// taken as none, as t need not be one the caller may list).
func (q *Queue) deadLetterSources(ctx context.Context, t Target) []string {
	switch q.SourcesFrom {
	case SourcesFound:
		return q.listed[t.ARN]
	case SourcesListed:
		out, err := q.api.(SourceLister).ListDeadLetterSourceQueues(ctx,
			&sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(t.URL), MaxResults: aws.Int32(10)}, q.opts...)
		if err != nil {
			q.log.Warn("dlq: cannot tell whether the destination is a dead-letter queue", "queue", t.URL, "error", err)
			return nil
		}
		return out.QueueUrls
	}
	return nil
}

func (q *Queue) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	q.Notes = append(q.Notes, s)
	q.log.Info("dlq: "+s, "queue", q.URL)
}

// ForeignDestination says, for a destination given to a replay, when it is
// not a source queue of q (its redrive policy does not name q): a slip,
// such as orders-v2 for orders, would send the messages to a queue they did
// not fail in, to run under another handler. A replay does not refuse such a
// destination, which is the operator's choice: a tool shows the warning,
// before a dry run's plan and a replay. Empty when t sends its dead letters
// to q.
func (q *Queue) ForeignDestination(ctx context.Context, t Target) (string, error) {
	out, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(t.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy},
	}, q.opts...)
	if err != nil {
		return "", fmt.Errorf("dlq: reading the redrive policy of %s: %w", t.Name, err)
	}
	if p, err := ParseRedrivePolicy(out.Attributes["RedrivePolicy"]); err == nil && p.DeadLetterTargetARN == q.ARN {
		return "", nil
	}
	msg := fmt.Sprintf("%s does not send its dead letters to %s: the messages would go to a queue they did not fail in", t.Name, q.Name)
	if len(q.Sources) > 0 {
		msg += " (its source queues: " + strings.Join(q.sourceNames(), ", ") + ")"
	}
	return msg, nil
}

// sourceNames returns the names of q's source queues, sorted.
func (q *Queue) sourceNames() []string {
	names := make([]string, len(q.Sources))
	for i, u := range q.Sources {
		names[i] = queueName(u)
	}
	slices.Sort(names)
	return names
}

// Target resolves a queue given by name, URL or ARN as a destination for
// this queue's messages: it must exist, be of the same type (standard or
// FIFO), not be this queue, and not be a dead-letter queue, where that can
// be known (an error that matches [ErrDeadLetterDestination], unless
// [Config.Force] opened this queue): messages sent there would not run.
// Any other queue may be a destination given this way; the sources a
// message names are checked by the replay itself.
func (q *Queue) Target(ctx context.Context, nameOrURL string) (Target, error) {
	u, err := resolveURL(ctx, q.api, q.opts, nameOrURL)
	if err != nil {
		return Target{}, err
	}
	t, _, err := q.load(ctx, u)
	if err != nil {
		if IsQueueMissing(err) {
			return Target{}, &QueueMissingError{Queue: nameOrURL, Err: err}
		}
		return Target{}, err
	}
	if err := sameARN(nameOrURL, t.ARN); err != nil {
		return Target{}, err
	}
	if err := q.checkTarget(t); err != nil {
		return Target{}, err
	}
	if srcs := q.deadLetterSources(ctx, t); len(srcs) > 0 && !q.force {
		names := make([]string, len(srcs))
		for i, s := range srcs {
			names[i] = queueName(s)
		}
		sort.Strings(names)
		verb := "sends"
		if len(names) > 1 {
			verb = "send"
		}
		return Target{}, fmt.Errorf("destination %s is a dead-letter queue (%s %s its dead letters there): messages sent to it would not run; give its source queue, %s, instead: %w",
			t.Name, strings.Join(names, ", "), verb, names[0], ErrDeadLetterDestination)
	}
	return t, nil
}

// load reads what a destination needs to be checked: its ARN, type and
// redrive policy.
func (q *Queue) load(ctx context.Context, u string) (Target, *RedrivePolicy, error) {
	out, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(u),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameQueueArn, types.QueueAttributeNameFifoQueue, types.QueueAttributeNameRedrivePolicy,
		},
	}, q.opts...)
	if err != nil {
		return Target{}, nil, fmt.Errorf("dlq: reading the attributes of queue %s: %w", queueName(u), err)
	}
	a := out.Attributes
	t := Target{URL: u, ARN: a["QueueArn"], Name: queueName(u), FIFO: a["FifoQueue"] == "true" || queue.IsFIFOURL(u)}
	if rp := a["RedrivePolicy"]; rp != "" {
		if p, err := ParseRedrivePolicy(rp); err == nil {
			return t, &p, nil
		}
	}
	return t, nil, nil
}

// sameQueue reports whether a and b are the same queue.
func sameQueue(a, b Target) bool {
	return a.URL == b.URL || (a.ARN != "" && a.ARN == b.ARN)
}

// checkTarget refuses a destination that is this queue or of another type.
func (q *Queue) checkTarget(t Target) error {
	if t.URL == q.URL || (t.ARN != "" && t.ARN == q.ARN) {
		return fmt.Errorf("destination %s is the dead-letter queue itself", t.Name)
	}
	if t.FIFO != q.FIFO {
		return fmt.Errorf("destination %s is a %s queue but dead-letter queue %s is a %s queue: messages can only be replayed to a queue of the same type",
			t.Name, queueKind(t.FIFO), q.Name, queueKind(q.FIFO))
	}
	return nil
}

// source returns the source queue that ref (a queue URL or ARN, as a
// message names it) designates, if that queue sends its dead letters to q.
// Otherwise reason says why not, and the message must not be sent there. A
// URL that a message carries is never called as given: it is matched, by
// account and name, against the sources SQS listed, or resolved by name
// and account with GetQueueUrl. err is for calls that failed.
func (q *Queue) source(ctx context.Context, ref string) (t Target, reason string, err error) {
	account, name, ok := queueKey(ref)
	if !ok {
		return Target{}, fmt.Sprintf("%q is neither a queue URL nor a queue ARN", ref), nil
	}
	key := account + "/" + name
	q.mu.Lock()
	e, found := q.targets[key]
	q.mu.Unlock()
	if found {
		return e.t, e.reason, nil
	}
	e, err = q.checkSource(ctx, ref, account, name)
	if err != nil {
		return Target{}, "", err
	}
	q.mu.Lock()
	q.targets[key] = e
	q.mu.Unlock()
	return e.t, e.reason, nil
}

func (q *Queue) checkSource(ctx context.Context, ref, account, name string) (targetEntry, error) {
	notFeeding := func() targetEntry {
		return targetEntry{reason: fmt.Sprintf("source queue %s does not send its dead letters to %s (%s)", name, q.Name, q.SourcesFrom)}
	}
	var u string
	if q.SourcesFrom != SourcesUnknown {
		for _, s := range q.Sources {
			if a, n, ok := queueKey(s); ok && a == account && n == name {
				u = s
				break
			}
		}
	}
	if u == "" {
		out, err := q.api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name), QueueOwnerAWSAccountId: aws.String(account)}, q.opts...)
		switch {
		case IsQueueMissing(err):
			return targetEntry{reason: fmt.Sprintf("source queue %s does not exist", ref)}, nil
		case err != nil:
			return targetEntry{}, fmt.Errorf("dlq: resolving source queue %s: %w", name, err)
		case q.SourcesFrom != SourcesUnknown:
			return notFeeding(), nil
		}
		u = aws.ToString(out.QueueUrl)
	}
	t, p, err := q.load(ctx, u)
	switch {
	case IsQueueMissing(err):
		return targetEntry{reason: fmt.Sprintf("source queue %s does not exist", ref)}, nil
	case err != nil:
		return targetEntry{}, err
	case p == nil || p.DeadLetterTargetARN != q.ARN:
		// Listed sources are checked again: the policy may have changed.
		return targetEntry{reason: fmt.Sprintf("source queue %s does not send its dead letters to %s (its redrive policy names %s)",
			name, q.Name, policyTarget(p))}, nil
	}
	if err := q.checkTarget(t); err != nil {
		return targetEntry{reason: err.Error()}, nil
	}
	return targetEntry{t: t}, nil
}

func policyTarget(p *RedrivePolicy) string {
	if p == nil {
		return "no queue"
	}
	if a, err := ParseARN(p.DeadLetterTargetARN); err == nil {
		return a.Name
	}
	return p.DeadLetterTargetARN
}

// queueKey returns the account and name of the queue a URL
// (SCHEME://HOST/ACCOUNT/NAME) or an ARN designates.
func queueKey(ref string) (account, name string, ok bool) {
	if strings.HasPrefix(ref, "arn:") {
		a, err := ParseARN(ref)
		if err != nil {
			return "", "", false
		}
		return a.Account, a.Name, true
	}
	u, err := url.Parse(ref)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", "", false
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// queueName returns the name of a queue from its URL (or the text itself
// when it is not a URL).
func queueName(u string) string {
	if i := strings.LastIndexByte(u, '/'); i >= 0 {
		return u[i+1:]
	}
	return u
}

func queueKind(fifo bool) string {
	if fifo {
		return "FIFO"
	}
	return "standard"
}

// Counts are a queue's approximate message counts.
type Counts struct {
	// Visible is ApproximateNumberOfMessages.
	Visible int `json:"visible"`
	// InFlight is ApproximateNumberOfMessagesNotVisible: received and
	// neither deleted nor visible again.
	InFlight int `json:"inFlight"`
	// Delayed is ApproximateNumberOfMessagesDelayed.
	Delayed int `json:"delayed"`
}

// Counts reads the queue's approximate message counts.
func (q *Queue) Counts(ctx context.Context) (Counts, error) {
	out, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.URL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	}, q.opts...)
	if err != nil {
		return Counts{}, fmt.Errorf("dlq: reading the message counts of %s: %w", q.Name, err)
	}
	n := func(k string) int { v, _ := strconv.Atoi(out.Attributes[k]); return v }
	return Counts{
		Visible:  n("ApproximateNumberOfMessages"),
		InFlight: n("ApproximateNumberOfMessagesNotVisible"),
		Delayed:  n("ApproximateNumberOfMessagesDelayed"),
	}, nil
}
