package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sdkhttp/dynamohttp"
)

// Status of a record.
const (
	StatusInProgress = "INPROGRESS"
	StatusCompleted  = "COMPLETED"
)

// Record is the state of one idempotency key.
type Record struct {
	Key    string
	Status string
	// Expiry is when the record stops counting, whatever DynamoDB's TTL
	// has done with it yet; for an in-progress record, never before its
	// LeaseExpiry.
	Expiry time.Time
	// LeaseExpiry is when an in-progress claim may be taken over.
	LeaseExpiry time.Time
	// Token identifies the holder of the claim.
	Token       string
	PayloadHash string
	// Result is what the handler saved with SetResult, if anything.
	Result []byte
	// Holder is the receive that made an in-progress claim (see Receive);
	// zero otherwise.
	Holder Receive
}

// Store keeps idempotency records. DynamoStore is the implementation for
// production; its methods make one request each, but for the takeover of a
// claim made with another Grace (see Receive), which takes two.
type Store interface {
	// Claim takes key for a new holder, by, until leaseUntil: it succeeds
	// when there is no record, when the record has expired, when an
	// in-progress claim's lease has expired, or when an in-progress claim
	// was made by an earlier receive of the same message (see Receive). It
	// returns the new claim's token, or, when the key is taken, the record
	// that holds it.
	Claim(ctx context.Context, key, payloadHash string, leaseUntil time.Time, by Receive) (token string, existing *Record, err error)
	// Complete marks the claim done, saving result (which may be nil).
	Complete(ctx context.Context, key, token string, result []byte) error
	// Release deletes the claim, so that the next attempt can claim again.
	Release(ctx context.Context, key, token string) error
	// ExtendLease moves the claim's lease to until, never back: when the
	// lease already ends later (an earlier extension that landed late), it
	// leaves it and succeeds.
	ExtendLease(ctx context.Context, key, token string, until time.Time) error
}

// Receive identifies the receive of a FIFO queue's message a claim is made
// for: the message's ID and its receive count (ApproximateReceiveCount).
// SQS delivers a FIFO queue's message again only once the visibility
// timeout of its earlier receive has ended: a claim made by an earlier
// receive of the same message belongs to a holder that died, or that lost
// the message's lease. Its next receive takes the claim over once the
// claim's lease, less the Grace the claim records, ends before LapsedBy,
// rather than after the whole lease and Config.ClaimGrace: in a crash loop,
// waiting would spend one of the receives the queue's redrive policy
// allows with every crash, and send a job no handler failed to the
// dead-letter queue.
//
// The Guard records as Grace its ClaimGrace less its heartbeat's LossLag,
// and sets LapsedBy a second (for clocks) before now: the earlier holder's
// visibility deadline, as its claim records it, then lies at least that
// holder's LossLag in the past. By then a holder that is still running has
// had its handler's context cancelled, by its heartbeat
// (visibility.Lease.LossLag) or, when it could not record a later deadline
// (its claim's extensions failed), by its claim's keeper, which gives such
// a claim up at that time. Each claim is taken over by its own holder's
// Grace, so that workers of a queue whose ClaimGrace or heartbeat Interval
// differ (two versions during a deployment, a queue whose visibility
// timeout changed) do not cut one another's wait short. The Guard makes a
// Receive only for the messages of a queue whose URL ends in ".fifo", held
// by the visibility heartbeat. The zero Receive (a standard queue's
// message, which SQS may deliver again while its first receive is still in
// flight, fair queues' included; one without the heartbeat; one whose
// receive count is unknown) takes nothing over.
type Receive struct {
	MessageID string
	Count     int
	// Grace is the part of the claim's lease that the message's next
	// receive does not wait for, recorded with the claim (to the
	// millisecond).
	Grace time.Duration
	// LapsedBy: the claim of an earlier receive of the message is taken
	// over if its lease, less its Grace, ends before LapsedBy. Zero in a
	// Record's Holder.
	LapsedBy time.Time
}

// takeable reports whether by may take over the in-progress claim r, as
// Receive describes. r.Holder.Grace counts to the millisecond, as the
// stores record it.
func (by Receive) takeable(r *Record) bool {
	return by.MessageID != "" && r.Status == StatusInProgress && r.Holder.MessageID == by.MessageID && r.Holder.Count < by.Count &&
		r.LeaseExpiry.UnixMilli()-r.Holder.Grace.Milliseconds() < by.LapsedBy.UnixMilli()
}

// ErrNotHolder is returned by Complete, Release and ExtendLease when the
// claim is no longer the caller's: its lease expired and another holder
// took the key. The Guard also cancels a handler's context with a cause
// matching it when the handler's claim is lost.
var ErrNotHolder = errors.New("idempotency: claim no longer held")

// DynamoAPI is the part of the DynamoDB client a DynamoStore calls. The
// calls of a *dynamodb.Client send each request's body from a copy of their
// own, so that a reply that comes back while the body is still being
// written does not make the SDK send an applied write again (a claim or a
// completion then failing its condition on its own first attempt; see the
// worker package's documentation).
// TransactWriteItems commits the writes handlers add with AddWrites; a
// test double of the client needs it too (it may return an error if the
// handlers add none).
type DynamoAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// StoreConfig configures a DynamoStore. The zero value of each field means its
// documented default; Table is required.
type StoreConfig struct {
	// Table is the DynamoDB table's name. Required. Its partition key must
	// be a string attribute named KeyAttr; TTL should be enabled on
	// ExpiryAttr (CreateTable does both).
	Table string
	// KeyPrefix is put before every key, to share a table between
	// handlers, or to keep tenants apart: a key k is stored as KeyPrefix +
	// KeySeparator + k, so that no two prefixes' keys collide ("a"+"bc"
	// and "ab"+"c" are "a#bc" and "ab#c"). It must not contain
	// KeySeparator, and is at most MaxKeyPrefixSize bytes. Default "":
	// keys are stored as they are, which may contain KeySeparator
	// themselves, so every store sharing a table should have a prefix of
	// its own. Two handlers (or tenants) whose producers may pick the same
	// key need a store each, with different prefixes: with one prefix,
	// the second job of a key is taken for a duplicate of the first (or
	// fails as a reused key).
	KeyPrefix string
	// TTL is how long a completed record keeps duplicates away. Default
	// 24h. An in-progress record lasts TTL from its claim too, and at
	// least until its claim's lease ends, however long the job runs.
	TTL time.Duration

	// Attribute names. Defaults: "id", "status", "expiry" (epoch seconds,
	// the TTL attribute), "lease_expiry" (epoch milliseconds),
	// "lease_token", "payload_hash", "result", "holder_message_id",
	// "holder_receive_count" and "holder_grace_ms" (the Receive that made
	// an in-progress claim, on a FIFO queue).
	KeyAttr, StatusAttr, ExpiryAttr, LeaseAttr, TokenAttr, HashAttr, ResultAttr string
	HolderAttr, ReceivesAttr, GraceAttr                                         string
}

// DefaultTTL is the default StoreConfig.TTL.
const DefaultTTL = 24 * time.Hour

// KeySeparator joins StoreConfig.KeyPrefix to a key in the partition key of
// a stored record.
const KeySeparator = "#"

// MaxKeyPrefixSize is the longest StoreConfig.KeyPrefix, in bytes: with the
// separator and a key of MaxKeySize, DynamoDB's 2048-byte limit on a
// partition key.
const MaxKeyPrefixSize = 2048 - MaxKeySize - len(KeySeparator)

func (c StoreConfig) withDefaults() StoreConfig {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.KeyAttr, "id")
	def(&c.StatusAttr, "status")
	def(&c.ExpiryAttr, "expiry")
	def(&c.LeaseAttr, "lease_expiry")
	def(&c.TokenAttr, "lease_token")
	def(&c.HashAttr, "payload_hash")
	def(&c.ResultAttr, "result")
	def(&c.HolderAttr, "holder_message_id")
	def(&c.ReceivesAttr, "holder_receive_count")
	def(&c.GraceAttr, "holder_grace_ms")
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	return c
}

// duplicateAttr returns an attribute name c gives to two of a record's
// attributes, "" if there is none.
func duplicateAttr(c StoreConfig) string {
	seen := map[string]bool{}
	for _, a := range []string{c.KeyAttr, c.StatusAttr, c.ExpiryAttr, c.LeaseAttr, c.TokenAttr, c.HashAttr, c.ResultAttr, c.HolderAttr, c.ReceivesAttr, c.GraceAttr} {
		if seen[a] {
			return a
		}
		seen[a] = true
	}
	return ""
}

// DynamoStore is a Store in a DynamoDB table, with conditional writes: a
// first-time message costs two requests (claim, complete), a duplicate one.
type DynamoStore struct {
	api   DynamoAPI
	opts  []func(*dynamodb.Options) // given to every call of api: dynamohttp.Options
	cfg   StoreConfig
	names map[string]string // expression attribute names
	now   func() time.Time

	// Where the table is, for the writes of AddWrites: its name (from
	// an ARN if cfg.Table is one), its region (from the ARN, else the
	// client's; "" if unknown) and its account ("" unless cfg.Table is an
	// ARN).
	tableName, region, account string

	// schemas keeps the keys of the tables of the handlers' writes, once
	// a commit refused as invalid had them described.
	schemas schemas
}

var (
	_ Store          = (*DynamoStore)(nil)
	_ WriteCommitter = (*DynamoStore)(nil)
)

// NewDynamoStore validates cfg and checks that the table exists with the
// expected key. It returns an error naming the problem otherwise.
func NewDynamoStore(ctx context.Context, api DynamoAPI, cfg StoreConfig) (*DynamoStore, error) {
	var errs []error
	if api == nil {
		errs = append(errs, errors.New("nil DynamoDB client"))
	}
	if cfg.Table == "" {
		//lint:ignore ST1005 the message starts with the name of the field
		errs = append(errs, errors.New("Table is required"))
	}
	switch {
	case cfg.TTL < 0:
		errs = append(errs, fmt.Errorf("TTL %s is negative", cfg.TTL))
	case cfg.TTL > 0 && cfg.TTL < time.Second:
		// A number of seconds given as a time.Duration (86400: 86.4µs)
		// would keep no duplicate away, without a word.
		errs = append(errs, fmt.Errorf("TTL %s is under a second: it is a time.Duration, not a number of seconds (24 * time.Hour for a day; 0: the default, a day)", cfg.TTL))
	}
	if strings.Contains(cfg.KeyPrefix, KeySeparator) {
		errs = append(errs, fmt.Errorf("KeyPrefix %q contains the separator %q", cfg.KeyPrefix, KeySeparator))
	}
	if !utf8.ValidString(cfg.KeyPrefix) {
		errs = append(errs, fmt.Errorf("KeyPrefix %q is not valid UTF-8 (DynamoDB would store it altered, as another prefix could be)", cfg.KeyPrefix))
	}
	if len(cfg.KeyPrefix) > MaxKeyPrefixSize {
		errs = append(errs, fmt.Errorf("KeyPrefix of %d bytes is over %d (keys are up to %d bytes, and DynamoDB's partition keys up to 2048): use a shorter prefix",
			len(cfg.KeyPrefix), MaxKeyPrefixSize, MaxKeySize))
	}
	if dup := duplicateAttr(cfg.withDefaults()); dup != "" {
		errs = append(errs, fmt.Errorf("attribute name %q is given to two of the record's attributes (KeyAttr, StatusAttr, ExpiryAttr, LeaseAttr, TokenAttr, HashAttr, ResultAttr, HolderAttr, ReceivesAttr, GraceAttr): give each its own", dup))
	}
	table, err := parseTable(cfg.Table)
	if err != nil {
		//lint:ignore ST1005 the message starts with the name of the field
		errs = append(errs, fmt.Errorf("Table: %w", err))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("idempotency: invalid StoreConfig: %w", errors.Join(errs...))
	}
	cfg = cfg.withDefaults()
	s := &DynamoStore{api: api, opts: dynamohttp.Options(api), cfg: cfg, now: time.Now, names: map[string]string{
		"#k": cfg.KeyAttr, "#s": cfg.StatusAttr, "#e": cfg.ExpiryAttr, "#l": cfg.LeaseAttr,
		"#t": cfg.TokenAttr, "#h": cfg.HashAttr, "#r": cfg.ResultAttr,
		"#m": cfg.HolderAttr, "#c": cfg.ReceivesAttr, "#g": cfg.GraceAttr,
	}}
	s.tableName, s.region, s.account = table.name, table.region, table.account
	if o, ok := api.(interface{ Options() dynamodb.Options }); ok && s.region == "" {
		s.region = o.Options().Region
	}
	out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &cfg.Table}, s.opts...)
	if err != nil {
		var missing *types.ResourceNotFoundException
		if errors.As(err, &missing) {
			return nil, fmt.Errorf("idempotency: table %s does not exist: %w", cfg.Table, err)
		}
		if fix := misconfiguration(err, cfg.Table, cfg.KeyAttr, false); fix != "" {
			return nil, fmt.Errorf("idempotency: describing table %s: %w: %s: %w", cfg.Table, ErrMisconfigured, fix, err)
		}
		return nil, fmt.Errorf("idempotency: describing table %s: %w", cfg.Table, err)
	}
	if err := checkKey(out.Table, cfg.KeyAttr); err != nil {
		return nil, fmt.Errorf("idempotency: table %s: %w", cfg.Table, err)
	}
	return s, nil
}

// checkKey reports how t, the idempotency table's description, is not
// keyed by keyAttr alone, of type S (an attribute without a definition
// passes).
func checkKey(t *types.TableDescription, keyAttr string) error {
	if t == nil {
		return errors.New("no table description")
	}
	key := keyOf(t)
	var hash string
	switch {
	case len(key) > 1:
		return fmt.Errorf("has a sort key %s; the store needs a table with a partition key only", key[1].name)
	case len(key) == 1:
		hash = key[0].name
	}
	if hash != keyAttr {
		return fmt.Errorf("partition key is %q, want %q (StoreConfig.KeyAttr)", hash, keyAttr)
	}
	if len(key) == 1 && key[0].typ != "" && key[0].typ != string(types.ScalarAttributeTypeS) {
		return fmt.Errorf("partition key %s is of type %s, want S", keyAttr, key[0].typ)
	}
	return nil
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// key returns the primary key of k's record.
func (s *DynamoStore) key(k string) map[string]types.AttributeValue {
	if s.cfg.KeyPrefix != "" {
		k = s.cfg.KeyPrefix + KeySeparator + k
	}
	return map[string]types.AttributeValue{s.cfg.KeyAttr: str(k)}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// names returns the expression attribute names an expression uses.
func (s *DynamoStore) namesFor(keys ...string) map[string]string {
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k] = s.names[k]
	}
	return m
}

// Config returns the store's configuration, defaults filled in.
func (s *DynamoStore) Config() StoreConfig { return s.cfg }

// Claim puts an in-progress record with one conditional PutItem (two for
// some takeovers, below). When the key is taken,
// ReturnValuesOnConditionCheckFailure=ALL_OLD returns the record that holds
// it in the same round trip.
//
// The claim's token is made before the request: when the condition fails on
// a record holding that very token, an earlier attempt of the same request
// wrote it (the SDK retried after its response was lost), and the claim is
// the caller's. When the request fails in a way that leaves its outcome
// unknown (the SDK's retries ran out on timeouts, lost replies or server
// errors), Claim deletes the record it may have written, with its token,
// as a best effort: otherwise the key would stay in progress, its
// duplicates postponed, until the lease ends.
//
// A claim made by a Receive records it, and one more term of the condition
// lets a later receive of the same message take it over. That term pins the
// Grace it was computed with, as DynamoDB conditions cannot add: when the
// claim that holds the key was made with another Grace, which lets the
// receive take it over, a second PutItem does, with that Grace pinned.
// Records written before Grace was recorded have none: they are taken
// over only once their lease ends.
func (s *DynamoStore) Claim(ctx context.Context, key, payloadHash string, leaseUntil time.Time, by Receive) (string, *Record, error) {
	now := s.now()
	token := newToken()
	item := s.key(key)
	item[s.cfg.StatusAttr] = str(StatusInProgress)
	item[s.cfg.ExpiryAttr] = num(s.inProgressExpiry(now, leaseUntil))
	item[s.cfg.LeaseAttr] = num(leaseUntil.UnixMilli())
	item[s.cfg.TokenAttr] = str(token)
	if payloadHash != "" {
		item[s.cfg.HashAttr] = str(payloadHash)
	}
	if by.MessageID != "" {
		item[s.cfg.HolderAttr] = str(by.MessageID)
		item[s.cfg.ReceivesAttr] = num(int64(by.Count))
		item[s.cfg.GraceAttr] = num(by.Grace.Milliseconds())
	}
	r, err := s.putClaim(ctx, key, token, item, now, by, by.Grace)
	if err == nil && r != nil && r.Holder.Grace != by.Grace.Truncate(time.Millisecond) && by.takeable(r) {
		// An earlier receive's claim, made with a Grace of its own (a
		// worker configured otherwise), which that Grace lets this
		// receive take over.
		r, err = s.putClaim(ctx, key, token, item, now, by, r.Holder.Grace)
	}
	if err == nil {
		if r != nil {
			return "", r, nil
		}
		return token, nil, nil
	}
	if retryable(err) {
		// Cut short too (the runtime stopping, the lease lost): the
		// claim may have been written, and would hold the key until its
		// lease ended. forget outlives ctx, for a moment.
		s.forget(ctx, key, token)
	}
	return "", nil, s.fail("claiming", key, err)
}

// putClaim puts item, the claim of token, with one conditional PutItem. by,
// when it is a Receive, may take over an earlier receive's claim made with
// a Grace of grace: its condition compares the claim's lease with
// by.LapsedBy plus grace, as DynamoDB conditions can add nothing. It
// returns the record that holds the key when the condition fails on
// another token's.
func (s *DynamoStore) putClaim(ctx context.Context, key, token string, item map[string]types.AttributeValue, now time.Time, by Receive, grace time.Duration) (*Record, error) {
	cond := "attribute_not_exists(#k) OR #e < :now OR (#s = :inprogress AND #l < :nowms)"
	names := s.namesFor("#k", "#e", "#s", "#l")
	values := map[string]types.AttributeValue{":now": num(now.Unix()), ":nowms": num(now.UnixMilli()), ":inprogress": str(StatusInProgress)}
	if by.MessageID != "" {
		cond += " OR (#s = :inprogress AND #m = :holder AND #c < :receives AND #g = :grace AND #l < :takeover)"
		names["#m"], names["#c"], names["#g"] = s.names["#m"], s.names["#c"], s.names["#g"]
		values[":holder"], values[":receives"] = str(by.MessageID), num(int64(by.Count))
		values[":grace"], values[":takeover"] = num(grace.Milliseconds()), num(by.LapsedBy.UnixMilli()+grace.Milliseconds())
	}
	_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &s.cfg.Table,
		Item:                                item,
		ConditionExpression:                 &cond,
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, s.opts...)
	var taken *types.ConditionalCheckFailedException
	if errors.As(err, &taken) {
		if len(taken.Item) == 0 {
			// DynamoDB returns the record that failed the condition
			// (ALL_OLD): without it, another holder with no lease would be
			// read, and the job postponed every second for ever.
			return nil, sqsworker.Unavailable(fmt.Errorf("%w: %w", ErrMisconfigured, errNoOldItem))
		}
		if r := s.record(key, taken.Item); r.Token != token {
			return r, nil
		}
		return nil, nil
	}
	return nil, err
}

// errNoOldItem is the misconfiguration of a DynamoAPI that answers a failed
// condition without the record: no retry passes it.
var errNoOldItem = errors.New("the claim's condition failed and the answer has no record (ReturnValuesOnConditionCheckFailure ALL_OLD): the DynamoAPI given to NewDynamoStore must pass DynamoDB's answer on whole")

// forgetTimeout bounds the best-effort release of a claim whose outcome is
// unknown.
const forgetTimeout = 2 * time.Second

// forget deletes the in-progress record of key if token holds it, with one
// attempt, and ignores the outcome: a claim that may have been written,
// whose caller will not run.
func (s *DynamoStore) forget(ctx context.Context, key, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetTimeout)
	defer cancel()
	_ = s.release(ctx, key, token, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
}

func (s *DynamoStore) record(key string, item map[string]types.AttributeValue) *Record {
	r := &Record{Key: key}
	getS := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	getN := func(name string) int64 {
		if v, ok := item[name].(*types.AttributeValueMemberN); ok {
			n, _ := strconv.ParseInt(v.Value, 10, 64)
			return n
		}
		return 0
	}
	r.Status = getS(s.cfg.StatusAttr)
	r.Token = getS(s.cfg.TokenAttr)
	r.PayloadHash = getS(s.cfg.HashAttr)
	r.Expiry = time.Unix(getN(s.cfg.ExpiryAttr), 0)
	if ms := getN(s.cfg.LeaseAttr); ms > 0 {
		r.LeaseExpiry = time.UnixMilli(ms)
	}
	if r.Status == StatusInProgress {
		r.Holder = Receive{MessageID: getS(s.cfg.HolderAttr), Count: int(getN(s.cfg.ReceivesAttr)),
			Grace: time.Duration(getN(s.cfg.GraceAttr)) * time.Millisecond}
	}
	if v, ok := item[s.cfg.ResultAttr].(*types.AttributeValueMemberB); ok {
		r.Result = v.Value
	}
	return r
}

// Complete marks the record completed, with one UpdateItem that only the
// claim's holder can make. The record then lives for StoreConfig.TTL.
func (s *DynamoStore) Complete(ctx context.Context, key, token string, result []byte) error {
	_, err := s.completeRecord(ctx, key, token, "", result)
	return err
}

// completion returns the update expression, names and values that complete
// the claim of token, saving result, with the record's expiry at exp.
func (s *DynamoStore) completion(token string, exp int64, result []byte) (string, map[string]string, map[string]types.AttributeValue) {
	update := "SET #s = :completed, #e = :exp REMOVE #l"
	names := s.namesFor("#s", "#e", "#l", "#t")
	values := map[string]types.AttributeValue{
		":completed": str(StatusCompleted), ":exp": num(exp), ":token": str(token),
	}
	if result != nil {
		update = "SET #s = :completed, #e = :exp, #r = :result REMOVE #l"
		names["#r"] = s.names["#r"]
		values[":result"] = &types.AttributeValueMemberB{Value: result}
	}
	return update, names, values
}

// completeRecord is Complete, returning the record as Claim returns it to a
// duplicate, given the payload hash the claim was made with.
func (s *DynamoStore) completeRecord(ctx context.Context, key, token, payloadHash string, result []byte) (*Record, error) {
	exp := s.now().Add(s.cfg.TTL).Unix()
	update, names, values := s.completion(token, exp, result)
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.cfg.Table, Key: s.key(key),
		UpdateExpression:          &update,
		ConditionExpression:       aws.String("#t = :token"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}, s.opts...)
	if err != nil && len(result) > 0 && isValidation(err) {
		// The item with its result may be too large: the caller tries
		// again without it.
		return nil, s.failAs("completing", key, err, false)
	}
	if err != nil {
		return nil, s.holderErr("completing", key, err)
	}
	return &Record{Key: key, Status: StatusCompleted, Expiry: time.Unix(exp, 0), Token: token,
		PayloadHash: payloadHash, Result: result}, nil
}

// Release deletes the in-progress record with one DeleteItem that only the
// claim's holder can make. A completed record is never deleted.
func (s *DynamoStore) Release(ctx context.Context, key, token string) error {
	return s.release(ctx, key, token)
}

func (s *DynamoStore) release(ctx context.Context, key, token string, opts ...func(*dynamodb.Options)) error {
	_, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.cfg.Table, Key: s.key(key),
		ConditionExpression:       aws.String("#t = :token AND #s = :inprogress"),
		ExpressionAttributeNames:  s.namesFor("#t", "#s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":token": str(token), ":inprogress": str(StatusInProgress)},
	}, append(s.opts, opts...)...) // s.opts is full: append copies
	return s.holderErr("releasing", key, err)
}

// inProgressExpiry is the expiry, in epoch seconds, of an in-progress
// record written at now whose lease ends at leaseUntil: StoreConfig.TTL from
// now, and never before the lease ends, so that neither a claim (to which an
// expired record counts as absent) nor DynamoDB's TTL takes the key from a
// holder whose lease outlasts the TTL.
func (s *DynamoStore) inProgressExpiry(now, leaseUntil time.Time) int64 {
	return max(now.Add(s.cfg.TTL).Unix(), ceilUnix(leaseUntil))
}

// ceilUnix returns t in epoch seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	return t.Add(time.Second - time.Nanosecond).Unix()
}

// ExtendLease moves the in-progress lease with one UpdateItem that only the
// claim's holder can make, and the record's expiry with it when the lease
// would outlast it. It never moves the lease back: an extension that lands
// after a later one (a request the network held, sent again by the SDK
// meanwhile) leaves the lease as it is and succeeds; a lease moved back
// would let another holder take the key while this one still runs.
func (s *DynamoStore) ExtendLease(ctx context.Context, key, token string, until time.Time) error {
	ms := until.UnixMilli()
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.cfg.Table, Key: s.key(key),
		UpdateExpression:         aws.String("SET #l = :until, #e = :exp"),
		ConditionExpression:      aws.String("#t = :token AND #s = :inprogress AND (attribute_not_exists(#l) OR #l <= :until)"),
		ExpressionAttributeNames: s.namesFor("#l", "#e", "#t", "#s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":until": num(ms), ":exp": num(s.inProgressExpiry(s.now(), until)),
			":token": str(token), ":inprogress": str(StatusInProgress),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, s.opts...)
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) && len(failed.Item) > 0 {
		if r := s.record(key, failed.Item); r.Status == StatusInProgress && r.Token == token && r.LeaseExpiry.UnixMilli() > ms {
			return nil // still ours, and held longer already
		}
	}
	return s.holderErr("extending the lease of", key, err)
}

func (s *DynamoStore) holderErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var notHolder *types.ConditionalCheckFailedException
	if errors.As(err, &notHolder) {
		return fmt.Errorf("idempotency: %s key %q: %w", op, key, ErrNotHolder)
	}
	return s.fail(op, key, err)
}

// fail wraps the error of a request about key, marking it with
// sqsworker.Unavailable when it means DynamoDB is unreachable, throttled or
// failing (see isOutage), so that the runtimes' circuit breaker counts it
// and the message is never dead-lettered for it.
//
// A request DynamoDB refused for the store's configuration (see
// ErrMisconfigured) is marked sqsworker.Unavailable too, and says what to
// fix: it is no fault of the job, and every job would fail the same way
// until an operator fixes the table.
func (s *DynamoStore) fail(op, key string, err error) error {
	return s.failAs(op, key, err, true)
}

// failAs is fail; validation says whether a ValidationException means the
// table does not fit the store (a request on a record alone), rather than
// a fault of what the handler gave (its result, its writes).
func (s *DynamoStore) failAs(op, key string, err error, validation bool) error {
	if fix := misconfiguration(err, s.cfg.Table, s.cfg.KeyAttr, validation); fix != "" {
		return sqsworker.Unavailable(fmt.Errorf("idempotency: %s key %q: %w: %s: %w", op, key, ErrMisconfigured, fix, err))
	}
	err = fmt.Errorf("idempotency: %s key %q: %w", op, key, err)
	if isOutage(err) {
		return sqsworker.Unavailable(err)
	}
	return err
}

// CommitWrites implements WriteCommitter with one TransactWriteItems: an
// Update completing the record on the condition that the claim is still
// c.Token's and in progress, then the writes, in order. c.ID is the request's
// ClientRequestToken: DynamoDB applies a request repeated within 10 minutes
// once, and answers it as the first. After that, a repeated request is
// cancelled by the completion's condition, and the record it finds,
// completed with c.Token, shows that the commit was applied: CommitWrites
// succeeds.
func (s *DynamoStore) CommitWrites(ctx context.Context, c Commit) (*Record, error) {
	items := make([]types.TransactWriteItem, 0, len(c.Writes)+1)
	var rec *Record
	if c.Key != "" {
		exp := c.At.Add(s.cfg.TTL).Unix()
		update, names, values := s.completion(c.Token, exp, c.Result)
		names["#s"] = s.names["#s"]
		values[":inprogress"] = str(StatusInProgress)
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName: &s.cfg.Table, Key: s.key(c.Key),
			UpdateExpression:                    &update,
			ConditionExpression:                 aws.String("#t = :token AND #s = :inprogress"),
			ExpressionAttributeNames:            names,
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}})
		rec = &Record{Key: c.Key, Status: StatusCompleted, Expiry: time.Unix(exp, 0), Token: c.Token,
			PayloadHash: c.PayloadHash, Result: c.Result}
	}
	items = append(items, c.Writes...)
	if len(items) == 0 {
		return rec, nil
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items}
	if c.ID != "" {
		in.ClientRequestToken = aws.String(c.ID)
	}
	_, err := s.api.TransactWriteItems(ctx, in, s.opts...)
	if err == nil {
		return rec, nil
	}
	return s.commitErr(ctx, c, err, rec)
}

// errRecordRefused marks a commit DynamoDB refused for the completion
// itself (the record with its result too large, say), not for the
// handler's writes.
var errRecordRefused = errors.New("DynamoDB refused the completion of the record")

// commitErr classifies the failure of c's transaction: the claim not c's
// (ErrNotHolder), or c already applied (nil and rec), or the handler's
// writes at fault (*TransactionCanceledError), or the completion at fault
// (errRecordRefused), or a table of the writes missing, denied or keyed
// otherwise than their items (*WritesTableError, see keysAtFault), or an
// outage (sqsworker.Unavailable).
func (s *DynamoStore) commitErr(ctx context.Context, c Commit, err error, rec *Record) (*Record, error) {
	n := len(c.Writes)
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() == "ValidationException" && n > 0 {
			refused := fmt.Errorf("idempotency: committing key %q with %d writes: DynamoDB refused the transaction (the writes must be on distinct items, at most %d, about 4 MB in all with the record, in the idempotency table's account and region, with valid expressions, with the keys of their tables): %w",
				c.Key, n, MaxWrites, err)
			return nil, s.keysAtFault(ctx, c, refused, err, func(int) bool { return true })
		}
		if fix, tables := writesMisconfiguration(err, s.cfg.Table, writeTables(c.Writes)); fix != "" {
			s.schemas.forget(tables)
			return nil, sqsworker.PartlyUnavailable(&WritesTableError{Tables: tables,
				Err: fmt.Errorf("idempotency: committing the writes of key %q: %w: %s: %w", c.Key, ErrMisconfigured, fix, err)})
		}
		return nil, s.failAs("committing the writes of", c.Key, err, n == 0)
	}
	reasons := tce.CancellationReasons
	if c.Key != "" && len(reasons) == n+1 {
		r := reasons[0]
		switch aws.ToString(r.Code) {
		case reasonConditionFailed:
			old := s.record(c.Key, r.Item)
			if old.Status == StatusCompleted && old.Token == c.Token {
				// An earlier attempt of this very commit was applied.
				rec.Expiry = old.Expiry
				return rec, nil
			}
			return nil, fmt.Errorf("idempotency: committing the writes of key %q: none applied: %w", c.Key, ErrNotHolder)
		case reasonValidation, "ItemCollectionSizeLimitExceeded":
			return nil, fmt.Errorf("idempotency: committing the writes of key %q: %w: %w", c.Key, errRecordRefused, err)
		}
		reasons = reasons[1:]
	}
	for _, r := range reasons {
		switch aws.ToString(r.Code) {
		case "", reasonNone, "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
			continue
		}
		// A write of the handler's is at fault: one whose key does not
		// fit its table (an item's key of another type) is that table's.
		cancelled := &TransactionCanceledError{Key: c.Key, Reasons: slices.Clone(reasons), Err: err}
		if !slices.ContainsFunc(reasons, func(r types.CancellationReason) bool { return aws.ToString(r.Code) == reasonValidation }) {
			return nil, cancelled
		}
		return nil, s.keysAtFault(ctx, c, cancelled, err, func(i int) bool {
			return len(reasons) != n || aws.ToString(reasons[i].Code) == reasonValidation
		})
	}
	if len(tce.CancellationReasons) == 0 {
		// No reasons to tell the claim lost from a condition of the
		// handler's: nothing was applied, and the retry sorts it out.
		return nil, &TransactionCanceledError{Key: c.Key, Err: err}
	}
	// Throttled, or in conflict with another transaction: worth retrying.
	return nil, s.fail("committing the writes of", c.Key, err)
}

// checkWrites implements writeChecker: every write in the table's account
// and region, none on the same item as another or as the record of key.
func (s *DynamoStore) checkWrites(key string, all []types.TransactWriteItem) error {
	account, accountOf := s.account, "the idempotency table"
	keyNames := map[string][]string{s.tableName: {s.cfg.KeyAttr}}
	tables := make([]tableRef, len(all))
	for i := range all {
		kind, name, k := describe(&all[i])
		t, err := parseTable(name)
		if err != nil {
			return fmt.Errorf("idempotency: AddWrites: write %d (%s): %w: %w", i, kind, err, ErrInvalidWrites)
		}
		tables[i] = t
		if t.region != "" && s.region != "" && t.region != s.region {
			return fmt.Errorf("idempotency: AddWrites: write %d (%s on table %s) is in region %s, the idempotency table in %s: a DynamoDB transaction stays in one account and region; use a table in %s for the effect, or a store whose table is in %s: %w",
				i, kind, name, t.region, s.region, s.region, t.region, ErrInvalidWrites)
		}
		if t.account != "" {
			if account == "" {
				account, accountOf = t.account, fmt.Sprintf("write %d", i)
			} else if t.account != account {
				return fmt.Errorf("idempotency: AddWrites: write %d (%s on table %s) is in account %s, %s in %s: a DynamoDB transaction stays in one account and region; use tables of one account: %w",
					i, kind, name, t.account, accountOf, account, ErrInvalidWrites)
			}
		}
		if _, known := keyNames[t.name]; !known && k != nil {
			keyNames[t.name] = slices.Sorted(maps.Keys(k))
		}
	}
	seen := map[string]int{}
	if key != "" {
		seen[identity(s.tableName, s.key(key))] = -1
	}
	for i := range all {
		kind, name, k := describe(&all[i])
		if k == nil { // a Put: its key is among its attributes
			k = map[string]types.AttributeValue{}
			for _, a := range keyNames[tables[i].name] {
				if v, ok := all[i].Put.Item[a]; ok {
					k[a] = v
				}
			}
			if len(k) == 0 || len(k) != len(keyNames[tables[i].name]) {
				continue // unknown key schema: DynamoDB will tell
			}
		}
		id := identity(tables[i].name, k)
		j, dup := seen[id]
		switch {
		case dup && j < 0:
			return fmt.Errorf("idempotency: AddWrites: write %d (%s on table %s) is on the idempotency record of key %q, which the middleware completes in the same transaction: use another item: %w",
				i, kind, name, key, ErrInvalidWrites)
		case dup:
			return fmt.Errorf("idempotency: AddWrites: writes %d and %d are on the same item of table %s: DynamoDB refuses two operations on one item in a transaction; merge them into one write: %w",
				j, i, name, ErrInvalidWrites)
		}
		seen[id] = i
	}
	return nil
}

// tableRef is where a table named by name or ARN is: its name, and its
// region and account when an ARN gives them.
type tableRef struct{ name, region, account string }

// parseTable reads a table's name or ARN.
func parseTable(s string) (tableRef, error) {
	if !arn.IsARN(s) {
		return tableRef{name: s}, nil
	}
	a, err := arn.Parse(s)
	if err != nil {
		return tableRef{}, fmt.Errorf("%q is not a valid ARN: %w", s, err)
	}
	name, ok := strings.CutPrefix(a.Resource, "table/")
	if a.Service != "dynamodb" || !ok || name == "" || strings.Contains(name, "/") {
		return tableRef{}, fmt.Errorf("%q is not the ARN of a DynamoDB table", s)
	}
	return tableRef{name: name, region: a.Region, account: a.AccountID}, nil
}
