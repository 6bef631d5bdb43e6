package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
	// has done with it yet.
	Expiry time.Time
	// LeaseExpiry is when an in-progress claim may be taken over.
	LeaseExpiry time.Time
	// Token identifies the holder of the claim.
	Token       string
	PayloadHash string
	// Result is what the handler saved with SetResult, if anything.
	Result []byte
}

// Store keeps idempotency records. DynamoStore is the implementation for
// production; its methods make one request each.
type Store interface {
	// Claim takes key for a new holder until leaseUntil: it succeeds when
	// there is no record, when the record has expired, or when an
	// in-progress claim's lease has expired. It returns the new claim's
	// token, or, when the key is taken, the record that holds it.
	Claim(ctx context.Context, key, payloadHash string, leaseUntil time.Time) (token string, existing *Record, err error)
	// Complete marks the claim done, saving result (which may be nil).
	Complete(ctx context.Context, key, token string, result []byte) error
	// Release deletes the claim, so that the next attempt can claim again.
	Release(ctx context.Context, key, token string) error
	// ExtendLease moves the claim's lease to until.
	ExtendLease(ctx context.Context, key, token string, until time.Time) error
}

// ErrNotHolder is returned by Complete, Release and ExtendLease when the
// claim is no longer the caller's: its lease expired and another holder
// took the key. The Guard also cancels a handler's context with a cause
// matching it when the handler's claim is lost.
var ErrNotHolder = errors.New("idempotency: claim no longer held")

// DynamoAPI is the part of the DynamoDB client a DynamoStore calls.
type DynamoAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
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
	// handlers: a key k is stored as KeyPrefix + KeySeparator + k, so that
	// no two prefixes' keys collide ("a"+"bc" and "ab"+"c" are "a#bc" and
	// "ab#c"). It must not contain KeySeparator. Default "": keys are
	// stored as they are, which may contain KeySeparator themselves, so
	// every store sharing a table should have a prefix of its own.
	KeyPrefix string
	// TTL is how long a completed record keeps duplicates away. Default
	// 24h.
	TTL time.Duration

	// Attribute names. Defaults: "id", "status", "expiry" (epoch seconds,
	// the TTL attribute), "lease_expiry" (epoch milliseconds),
	// "lease_token", "payload_hash", "result".
	KeyAttr, StatusAttr, ExpiryAttr, LeaseAttr, TokenAttr, HashAttr, ResultAttr string
}

// DefaultTTL is the default StoreConfig.TTL.
const DefaultTTL = 24 * time.Hour

// KeySeparator joins StoreConfig.KeyPrefix to a key in the partition key of
// a stored record.
const KeySeparator = "#"

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
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	return c
}

// DynamoStore is a Store in a DynamoDB table, with conditional writes: a
// first-time message costs two requests (claim, complete), a duplicate one.
type DynamoStore struct {
	api   DynamoAPI
	cfg   StoreConfig
	names map[string]string // expression attribute names
	now   func() time.Time
}

var _ Store = (*DynamoStore)(nil)

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
	if cfg.TTL < 0 {
		errs = append(errs, fmt.Errorf("TTL %s is negative", cfg.TTL))
	}
	if strings.Contains(cfg.KeyPrefix, KeySeparator) {
		errs = append(errs, fmt.Errorf("KeyPrefix %q contains the separator %q", cfg.KeyPrefix, KeySeparator))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("idempotency: invalid StoreConfig: %w", errors.Join(errs...))
	}
	cfg = cfg.withDefaults()
	s := &DynamoStore{api: api, cfg: cfg, now: time.Now, names: map[string]string{
		"#k": cfg.KeyAttr, "#s": cfg.StatusAttr, "#e": cfg.ExpiryAttr, "#l": cfg.LeaseAttr,
		"#t": cfg.TokenAttr, "#h": cfg.HashAttr, "#r": cfg.ResultAttr,
	}}
	out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &cfg.Table})
	if err != nil {
		var missing *types.ResourceNotFoundException
		if errors.As(err, &missing) {
			return nil, fmt.Errorf("idempotency: table %s does not exist: %w", cfg.Table, err)
		}
		return nil, fmt.Errorf("idempotency: describing table %s: %w", cfg.Table, err)
	}
	if err := checkKey(out.Table, cfg.KeyAttr); err != nil {
		return nil, fmt.Errorf("idempotency: table %s: %w", cfg.Table, err)
	}
	return s, nil
}

func checkKey(t *types.TableDescription, keyAttr string) error {
	if t == nil {
		return errors.New("no table description")
	}
	var hash string
	for _, k := range t.KeySchema {
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = aws.ToString(k.AttributeName)
		case types.KeyTypeRange:
			return fmt.Errorf("has a sort key %s; the store needs a table with a partition key only", aws.ToString(k.AttributeName))
		}
	}
	if hash != keyAttr {
		return fmt.Errorf("partition key is %q, want %q (StoreConfig.KeyAttr)", hash, keyAttr)
	}
	for _, d := range t.AttributeDefinitions {
		if aws.ToString(d.AttributeName) == keyAttr && d.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("partition key %s is of type %s, want S", keyAttr, d.AttributeType)
		}
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

// Claim puts an in-progress record with one conditional PutItem. When the key
// is taken, ReturnValuesOnConditionCheckFailure=ALL_OLD returns the record
// that holds it in the same round trip.
//
// The claim's token is made before the request: when the condition fails on
// a record holding that very token, an earlier attempt of the same request
// wrote it (the SDK retried after its response was lost), and the claim is
// the caller's.
func (s *DynamoStore) Claim(ctx context.Context, key, payloadHash string, leaseUntil time.Time) (string, *Record, error) {
	now := s.now()
	token := newToken()
	item := s.key(key)
	item[s.cfg.StatusAttr] = str(StatusInProgress)
	item[s.cfg.ExpiryAttr] = num(now.Add(s.cfg.TTL).Unix())
	item[s.cfg.LeaseAttr] = num(leaseUntil.UnixMilli())
	item[s.cfg.TokenAttr] = str(token)
	if payloadHash != "" {
		item[s.cfg.HashAttr] = str(payloadHash)
	}
	_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &s.cfg.Table,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(#k) OR #e < :now OR (#s = :inprogress AND #l < :nowms)"),
		ExpressionAttributeNames:            s.namesFor("#k", "#e", "#s", "#l"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": num(now.Unix()), ":nowms": num(now.UnixMilli()), ":inprogress": str(StatusInProgress)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return token, nil, nil
	}
	var taken *types.ConditionalCheckFailedException
	if errors.As(err, &taken) {
		r := s.record(key, taken.Item)
		if r.Token == token {
			return token, nil, nil
		}
		return "", r, nil
	}
	return "", nil, fmt.Errorf("idempotency: claiming key %q: %w", key, err)
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

// completeRecord is Complete, returning the record as Claim returns it to a
// duplicate, given the payload hash the claim was made with.
func (s *DynamoStore) completeRecord(ctx context.Context, key, token, payloadHash string, result []byte) (*Record, error) {
	exp := s.now().Add(s.cfg.TTL).Unix()
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
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.cfg.Table, Key: s.key(key),
		UpdateExpression:          &update,
		ConditionExpression:       aws.String("#t = :token"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	if err != nil {
		return nil, s.holderErr("completing", key, err)
	}
	return &Record{Key: key, Status: StatusCompleted, Expiry: time.Unix(exp, 0), Token: token,
		PayloadHash: payloadHash, Result: result}, nil
}

// Release deletes the record with one DeleteItem that only the claim's holder
// can make.
func (s *DynamoStore) Release(ctx context.Context, key, token string) error {
	_, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.cfg.Table, Key: s.key(key),
		ConditionExpression:       aws.String("#t = :token"),
		ExpressionAttributeNames:  s.namesFor("#t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":token": str(token)},
	})
	return s.holderErr("releasing", key, err)
}

// ExtendLease moves the in-progress lease with one UpdateItem that only the
// claim's holder can make.
func (s *DynamoStore) ExtendLease(ctx context.Context, key, token string, until time.Time) error {
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.cfg.Table, Key: s.key(key),
		UpdateExpression:          aws.String("SET #l = :until"),
		ConditionExpression:       aws.String("#t = :token AND #s = :inprogress"),
		ExpressionAttributeNames:  s.namesFor("#l", "#t", "#s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": num(until.UnixMilli()), ":token": str(token), ":inprogress": str(StatusInProgress)},
	})
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
	return fmt.Errorf("idempotency: %s key %q: %w", op, key, err)
}
