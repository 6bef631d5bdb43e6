package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/attempt"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
	"github.com/sqsworker/sqsworker/internal/sdkhttp/dynamohttp"
)

// Attribute is the message attribute that marks a chunk: its value is the
// batch ID and the chunk's index, joined by "#" ("report-7#41"). A chunk
// carries it and its idempotency key: two of SQS's ten message attributes,
// which leaves room for the eight of the failure metadata the runtimes add
// when they dead-letter it.
const Attribute = "batch-chunk"

// AttrCompleted is the message attribute that marks a completion job: its
// value is the batch ID.
const AttrCompleted = "batch-completed"

// KeyPrefix starts the partition key of every item of a batch in the table:
// "batch#<ID>" for the batch, "batch#<ID>#callback" for its completion
// job, "batch#<ID>#chunk#<index>" for a counted or failed chunk.
const KeyPrefix = "batch"

// MaxIDLength is the longest batch ID, in bytes.
const MaxIDLength = 128

// MaxFailedIndexes is the most failed chunks whose indexes a batch's item
// lists (its failed_chunks set), and [Coordinator.Get] with them: 1,000.
// Every count rewrites the batch's item, and DynamoDB bills a write by the
// item's size (and refuses items over 400 KB): a list of every failure
// would make each count dearer as failures grow, and past some 100,000 of
// them fail every write to the item, counts included. Failures beyond it are counted
// exactly (Progress.Failed) but not listed (Progress.FailedUnlisted); their
// chunk items still hold their errors, and [DeadLetters] finds them in the
// dead-letter queue. A failed chunk that succeeds later leaves the list,
// which makes room for the next failure; the counters stay exact whether
// or not its index was listed.
const MaxFailedIndexes = 1000

var validID = regexp.MustCompile(`^[A-Za-z0-9_.:/=+@-]+$`)

// ChunkKey returns the idempotency key of chunk i of batch id:
// "batch#<id>#<i>".
func ChunkKey(id string, i int) string { return KeyPrefix + "#" + id + "#" + strconv.Itoa(i) }

// DoneKey returns the idempotency key of the completion job of batch id:
// "batch#<id>#done".
func DoneKey(id string) string { return KeyPrefix + "#" + id + "#done" }

// ParseChunk reads the Attribute of a message: the batch ID and the
// chunk's index, and whether the message is a chunk.
func ParseChunk(m *sqsworker.Message) (id string, index int, ok bool) {
	v, found := m.Attribute(Attribute)
	if !found {
		return "", 0, false
	}
	id, n, found := strings.Cut(v, "#")
	if !found || id == "" {
		return "", 0, false
	}
	i, err := strconv.Atoi(n)
	if err != nil || i < 0 {
		return "", 0, false
	}
	return id, i, true
}

// CheckID returns an error naming the problem when id is not a valid batch
// ID: 1 to MaxIDLength bytes of letters, digits and _ . : / = + @ -.
func CheckID(id string) error {
	switch {
	case id == "":
		return errors.New("batch: the batch ID is empty: give every batch an ID of its own, such as the ID of the job it splits")
	case len(id) > MaxIDLength:
		return fmt.Errorf("batch: the batch ID is %d bytes, over %d: use a shorter ID (a digest of a long one)", len(id), MaxIDLength)
	case !validID.MatchString(id):
		return fmt.Errorf("batch: batch ID %q: use letters, digits and _ . : / = + @ - only (not #, which separates the parts of keys)", id)
	}
	return nil
}

// DynamoAPI is the part of the DynamoDB client a Coordinator calls. The
// calls of a *dynamodb.Client, and of an *sqs.Client given as [SQSAPI],
// send each request's body from a copy of their own, so that a reply that
// comes back while the body is still being written does not make the SDK
// send an applied call again (a conditional write then failing on its own
// first attempt, a chunk sent twice; see the worker package's
// documentation).
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// SQSAPI is the part of the SQS client a Coordinator calls: SendMessageBatch
// to enqueue chunks (Create), SendMessage to enqueue completion jobs (the
// middleware).
type SQSAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ SQSAPI = (*sqs.Client)(nil)

// Config configures a Coordinator. The zero value of each field means its
// documented default; Table is required.
type Config struct {
	// Table is the idempotency table (its name or ARN), whose partition
	// key is the string attribute KeyAttr. Required.
	Table string
	// KeyAttr is the table's partition key. Default "id", as the
	// idempotency store's.
	KeyAttr string
	// ExpiryAttr is the table's TTL attribute, in epoch seconds. Default
	// "expiry", as the idempotency store's.
	ExpiryAttr string
	// TTL is how long a batch and its chunk items are kept after the batch
	// is created: longer than the batch may take, dead-letter replays
	// included; Create refuses a chunk delayed as long. At least MinTTL.
	// Default 14 days, SQS's longest message retention.
	TTL time.Duration
	// MaxReceiveCount, when set, is the attempt after whose failure SQS (or
	// the runtime) dead-letters a chunk: the queue's maxReceiveCount. A
	// chunk failing that attempt is recorded as failed. Default 0: only
	// sqsworker.Permanent failures are recorded, and the chunks SQS
	// dead-lettered are found with DeadLetters. It also tells the chunk
	// that completes a batch that it is on its last receive (see
	// "Completion" in the package documentation); unset, the queue's
	// redrive policy is read for that. Set above the maxReceiveCount of the
	// queue's redrive policy, the policy's count is used, as SQS
	// dead-letters the chunk then, and the mistake is logged.
	MaxReceiveCount int
	// NotifyLease is how long the consumer that sends a batch's completion
	// job holds the right to send it: another consumer sends it only once
	// the lease has ended without the send being marked done. It must
	// cover one SendMessage and one UpdateItem. It also bounds the marking
	// of the send once the chunk's run has ended. At least MinNotifyLease.
	// Default 30s.
	NotifyLease time.Duration
	// RequestTimeout bounds each attempt of a request to DynamoDB, and of
	// the queue reads of SQS (a completion's send is bounded by
	// NotifyLease as a whole): an attempt not answered within it is given
	// up, and the SDK's retryer sends the request again, within its own
	// limit of attempts. A DynamoDB that takes requests and never answers
	// fails a chunk's run as unavailable once they are spent, which the
	// runtime's circuit breaker counts and its next receive tries again,
	// rather than hold its handler slot for as long as its context lives
	// (up to the heartbeat's 12 hours); the count's own retries try again
	// within their 30s. Default 10s.
	RequestTimeout time.Duration
	// Logger receives what the middleware could not do. Message bodies are
	// never logged. Default slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultTTL            = 14 * 24 * time.Hour
	DefaultNotifyLease    = 30 * time.Second
	DefaultRequestTimeout = 10 * time.Second
)

// Least values of Config: a shorter TTL would let DynamoDB delete a batch
// its chunks still need (each then dead-lettered as of an unknown batch),
// and a shorter NotifyLease would end before a SendMessage and an
// UpdateItem (every consumer then sending the completion job).
const (
	MinTTL         = time.Hour
	MinNotifyLease = time.Second
)

// Coordinator creates batches, counts their chunks, sends their completion
// jobs and reports their progress. It is safe for concurrent use.
type Coordinator struct {
	db  DynamoAPI
	sqs SQSAPI
	// dbOpts and sqsOpts are given to every call of db and of sqs
	// (dynamohttp.Options, sdkhttp.SQSOptions); the producers made with
	// sqs find theirs.
	dbOpts  []func(*dynamodb.Options)
	sqsOpts []func(*sqs.Options)
	cfg     Config
	now     func() time.Time
	// failedCap is the most indexes the batch's failed_chunks set
	// holds: MaxFailedIndexes, smaller in tests.
	failedCap int
	// countBudget bounds the time a chunk's count, or its failure's
	// record, takes with its retries: countBudget, shorter in tests.
	countBudget time.Duration
	// queues caches the limits of the chunks' queues (see limits).
	queues limitsCache
}

// New validates cfg and checks that the table exists with the expected
// partition key, so that a wrong table name fails here rather than at the
// first chunk. It returns one error naming every problem.
func New(ctx context.Context, db DynamoAPI, q SQSAPI, cfg Config) (*Coordinator, error) {
	var errs []error
	if db == nil {
		errs = append(errs, errors.New("nil DynamoDB client"))
	}
	if q == nil {
		errs = append(errs, errors.New("nil SQS client"))
	}
	if cfg.Table == "" {
		//lint:ignore ST1005 the message starts with the name of the field
		errs = append(errs, errors.New("Table is required: the name of the idempotency table, where batches are kept"))
	}
	if cfg.TTL < 0 || cfg.TTL > 0 && cfg.TTL < MinTTL {
		errs = append(errs, fmt.Errorf("TTL %s is under %s: a batch's item must outlive its chunks, their retries and their replays from the dead-letter queue (0: the default, %s)", cfg.TTL, MinTTL, DefaultTTL))
	}
	if cfg.MaxReceiveCount < 0 {
		errs = append(errs, fmt.Errorf("MaxReceiveCount %d is negative", cfg.MaxReceiveCount))
	}
	if cfg.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout %s is negative (0: the default, %s)", cfg.RequestTimeout, DefaultRequestTimeout))
	}
	if cfg.NotifyLease < 0 || cfg.NotifyLease > 0 && cfg.NotifyLease < MinNotifyLease {
		errs = append(errs, fmt.Errorf("NotifyLease %s is under %s: it must cover one SendMessage and one UpdateItem (0: the default, %s)", cfg.NotifyLease, MinNotifyLease, DefaultNotifyLease))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("batch: invalid Config: %w", errors.Join(errs...))
	}
	if cfg.KeyAttr == "" {
		cfg.KeyAttr = "id"
	}
	if cfg.ExpiryAttr == "" {
		cfg.ExpiryAttr = "expiry"
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.NotifyLease == 0 {
		cfg.NotifyLease = DefaultNotifyLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	bound := attempt.Bound(cfg.RequestTimeout)
	c := &Coordinator{
		db: db, sqs: q, cfg: cfg, now: time.Now, failedCap: MaxFailedIndexes, countBudget: countBudget,
		dbOpts:  append(dynamohttp.Options(db), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, bound) }),
		sqsOpts: append(sdkhttp.SQSOptions(q), func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, bound) }),
	}
	if err := c.checkTable(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// checkTable checks that the table exists with a string partition key named
// cfg.KeyAttr.
func (c *Coordinator) checkTable(ctx context.Context) error {
	cfg := c.cfg
	out, err := c.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &cfg.Table}, c.dbOpts...)
	if err != nil {
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			return fmt.Errorf("batch: table %s does not exist: give Config.Table the idempotency table's name (create one with idempotency.CreateTable, or the CDK construct): %w", cfg.Table, err)
		}
		return fmt.Errorf("batch: reading table %s: %w", cfg.Table, err)
	}
	for _, k := range out.Table.KeySchema {
		if k.KeyType == types.KeyTypeHash {
			if aws.ToString(k.AttributeName) != cfg.KeyAttr {
				return fmt.Errorf("batch: table %s has the partition key %q, not %q: set Config.KeyAttr, or use the idempotency table", cfg.Table, aws.ToString(k.AttributeName), cfg.KeyAttr)
			}
		} else {
			return fmt.Errorf("batch: table %s has a sort key (%s): use the idempotency table, whose key is a partition key alone", cfg.Table, aws.ToString(k.AttributeName))
		}
	}
	return nil
}

// Attribute names of the batch item and the chunk items, besides the key
// and the expiry.
const (
	aKind       = "kind"          // "batch" or "chunk"
	aTotal      = "total"         // chunks in the batch
	aDone       = "done"          // chunks counted as succeeded
	aFailed     = "failed"        // chunks recorded as failed, not yet succeeded: exact
	aFailedSet  = "failed_chunks" // indexes of failed chunks (NS), at most failedCap of them
	aSpec       = "spec_hash"     // digest of the batch's spec
	aQueue      = "queue"         // the chunks' queue URL
	aCreated    = "created"       // epoch ms
	aSent       = "sent"          // epoch ms when every chunk was enqueued
	aCbQueue    = "callback_queue"
	aCbBody     = "callback_body"
	aCbAttrs    = "callback_attrs" // JSON
	aCbGroup    = "callback_group"
	aNotifyTok  = "notify_token"
	aNotifyTill = "notify_until" // epoch ms
	aNotified   = "notified"     // epoch ms
	aNotifyID   = "notify_message_id"
	aStatus     = "chunk_status" // DONE or FAILED
	aAt         = "at"           // epoch ms
	aError      = "error"
	aClass      = "error_class"
	aAttempts   = "attempts"
)

// Chunk statuses.
const (
	StatusDone   = "DONE"
	StatusFailed = "FAILED"
)

func (c *Coordinator) batchKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{c.cfg.KeyAttr: str(KeyPrefix + "#" + id)}
}

// callbackKey is the key of the item that holds the completion job of
// batch id: "batch#<id>#callback".
func (c *Coordinator) callbackKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{c.cfg.KeyAttr: str(KeyPrefix + "#" + id + "#callback")}
}

func (c *Coordinator) chunkKey(id string, i int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{c.cfg.KeyAttr: str(KeyPrefix + "#" + id + "#chunk#" + strconv.Itoa(i))}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func getNum(item map[string]types.AttributeValue, name string) int64 {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

func getStr(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getNums(item map[string]types.AttributeValue, name string) []int {
	v, ok := item[name].(*types.AttributeValueMemberNS)
	if !ok {
		return nil
	}
	out := make([]int, 0, len(v.Value))
	for _, s := range v.Value {
		if n, err := strconv.Atoi(s); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// UnknownBatchError is the error for a batch ID the table does not hold:
// never created, created in another table, or expired (Config.TTL).
type UnknownBatchError struct {
	ID, Table string
}

func (e *UnknownBatchError) Error() string {
	return fmt.Sprintf("batch: no batch %q in table %s: check the ID, and that the table is the one the batch was created in (the producer's Config.Table); batches expire %s after their creation by default", e.ID, e.Table, DefaultTTL)
}

// SpecMismatchError is the error of Create for a batch ID already created
// with other chunks or another completion job.
type SpecMismatchError struct {
	ID string
}

func (e *SpecMismatchError) Error() string {
	return fmt.Sprintf("batch: batch %q already exists with other chunks or another callback: creating it again must repeat the same spec; give a new batch its own ID", e.ID)
}

// ReusedIDError is the error of Create for the ID of a batch that expired
// (Config.TTL) and left items of its chunks in the table: the new batch's
// chunks would be taken for counted already, and it would never complete.
type ReusedIDError struct {
	ID, Table string
	// Chunk is the index of a chunk whose item remains.
	Chunk int
}

func (e *ReusedIDError) Error() string {
	return fmt.Sprintf("batch: batch ID %q was used by a batch that expired, whose chunk items (chunk %d's, at least) remain in table %s until their own expiry: a new batch of that ID would take its chunks for counted already and never complete; give the new batch a new ID", e.ID, e.Chunk, e.Table)
}
