package idempotency

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/jobkey"
)

// Limits of the writes a handler adds with AddWrites: DynamoDB's limits on
// one TransactWriteItems, less what the claim's completion takes.
const (
	// MaxWrites is the most writes one handler run can add: DynamoDB's
	// 100 items per transaction, one of which completes the claim.
	MaxWrites = 99
	// MaxTransactionSize is DynamoDB's limit on the size of one
	// transaction, 4 MB; the writes, the completion and its saved result
	// share it.
	MaxTransactionSize = 4 << 20
	// MaxKeySize is the longest idempotency key, in bytes. A longer one
	// fails its message as Permanent. DynamoDB's partition keys are up to
	// 2048 bytes; the rest is left for StoreConfig.KeyPrefix.
	MaxKeySize = jobkey.MaxSize
)

// completionSize is the room the claim's completion takes in a transaction,
// besides its key and saved result: attribute names, values and
// expressions.
const completionSize = 512

// ErrNoClaim is returned by AddWrites when its context carries no claim: it
// was called outside a handler run by the idempotency middleware, or after
// that handler returned.
var ErrNoClaim = errors.New("idempotency: no claim to add writes to (AddWrites outside a handler run by the idempotency middleware, or after it returned)")

// ErrInvalidWrites is matched (errors.Is) by the errors of AddWrites that
// refuse writes for breaking one of DynamoDB's limits on a transaction:
// more than MaxWrites items, more than MaxTransactionSize bytes, an item
// over 400 KB, two writes on one item, a write on the claim's own record,
// a table in another account or region than the idempotency table, or a
// malformed write. Those errors are also sqsworker.Permanent: the job
// cannot succeed as written.
var ErrInvalidWrites = errors.New("idempotency: invalid transactional writes")

// pendingKey is the context key of a handler's *pending.
type pendingKey struct{}

// pending is what the middleware keeps for one handler run: its key and the
// writes it added, to commit with the claim's completion.
type pending struct {
	key   string // "" when the handler runs without a claim
	store Store  // whose record the claim of key is
	wc    WriteCommitter

	mu      sync.Mutex
	writes  []types.TransactWriteItem
	size    int   // estimated bytes of writes
	sealed  bool  // the handler returned
	refused error // the first error AddWrites returned, if any
}

// AddWrites adds DynamoDB writes (each a Put, Update, Delete or
// ConditionCheck) to the completion of the claim of the message whose
// handler runs with ctx. When the handler returns nil, the middleware
// commits them in one TransactWriteItems together with the completion of
// the idempotency record, provided the claim is still the handler's: the
// effect and the completed record both exist, or neither does. A crash
// anywhere re-runs the job cleanly, and a duplicate never applies the
// writes again. When the handler fails, its writes are dropped.
//
// Writes accumulate over calls, in order; the items must not be modified
// after the call. They must fit one transaction with the completion: at
// most MaxWrites (99) items, MaxTransactionSize (4 MB) in all with the
// saved result, each item under 400 KB, no two on the same item nor on the
// idempotency record, all in the idempotency table's account and region.
// A call breaking a limit adds nothing and returns an error matching
// ErrInvalidWrites, which is also sqsworker.Permanent; the job then fails
// with that error even if the handler returns nil.
//
// Outside a handler run by the middleware (or once it has returned),
// AddWrites returns ErrNoClaim. With a store that is not a WriteCommitter
// it returns an error. With Config.Disabled, or for a message run without a
// key (RunWithoutKey), the writes are committed in a transaction of their
// own, without idempotency.
//
// When the transaction is cancelled because the claim is no longer the
// handler's, nothing is applied and the job fails with an error matching
// ErrNotHolder: its retry finds the key completed by the new holder
// (acknowledged), still held (postponed) or free again (run). When it is
// cancelled because a condition of the handler's writes failed, nothing is
// applied, the claim is released, and the job fails with an error wrapping
// a *TransactionCanceledError; see its documentation. When it is refused
// because a table of the writes is missing, denied, or keyed otherwise than
// its items (an operator's mistake, a tenant's table say), the job waits
// with a *WritesTableError naming the table; telling a table keyed
// otherwise from an invalid write takes dynamodb:DescribeTable on the
// writes' tables, called only after such a refusal.
func AddWrites(ctx context.Context, items ...types.TransactWriteItem) error {
	p, ok := ctx.Value(pendingKey{}).(*pending)
	if !ok {
		return ErrNoClaim
	}
	return p.add(items)
}

// KeyFromContext returns the idempotency key of the message whose handler
// runs with ctx, as Config.Key returned it (without StoreConfig.KeyPrefix),
// and whether there is one. Pass it to services outside DynamoDB that
// deduplicate requests themselves, as an Idempotency-Key header for
// instance, so that a job run again after a crash repeats the same request
// rather than making a new one.
func KeyFromContext(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(pendingKey{}).(*pending)
	if !ok || p.key == "" {
		return "", false
	}
	return p.key, true
}

func (p *pending) add(items []types.TransactWriteItem) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sealed {
		return fmt.Errorf("idempotency: AddWrites after the handler returned: %w", ErrNoClaim)
	}
	if p.wc == nil {
		return p.refuse(errors.New("idempotency: AddWrites: the Guard's Store cannot commit writes (it does not implement idempotency.WriteCommitter; DynamoStore does)"))
	}
	if len(items) == 0 {
		return nil
	}
	all := append(slices.Clip(p.writes), items...)
	size, err := checkWrites(p.key, all, len(p.writes), p.size)
	if err == nil {
		if c, ok := p.wc.(writeChecker); ok {
			err = c.checkWrites(p.key, all)
		}
	}
	if err != nil {
		return p.refuse(sqsworker.Permanent(err))
	}
	p.writes, p.size = all, size
	return nil
}

// refuse remembers the first refusal, which fails the job. p.mu is held.
func (p *pending) refuse(err error) error {
	if p.refused == nil {
		p.refused = err
	}
	return err
}

// seal ends AddWrites for p and returns its writes and first refusal.
func (p *pending) seal() ([]types.TransactWriteItem, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sealed = true
	return p.writes, p.size, p.refused
}

// checkWrites checks the limits every store shares on all, whose items from
// from on are new, and returns their estimated size, given that of the
// items before from.
func checkWrites(key string, all []types.TransactWriteItem, from, size int) (int, error) {
	for i := from; i < len(all); i++ {
		n, err := checkWrite(i, &all[i])
		if err != nil {
			return 0, err
		}
		size += n
	}
	forKey := ""
	if key != "" {
		forKey = fmt.Sprintf(" for key %q", key)
	}
	if len(all) > MaxWrites {
		return 0, fmt.Errorf("idempotency: AddWrites: %d writes%s, over the limit of %d (DynamoDB's 100 items per transaction, one of which completes the claim): split the job into messages of their own, each with its own key: %w",
			len(all), forKey, MaxWrites, ErrInvalidWrites)
	}
	if limit := MaxTransactionSize - completionSize - len(key); size > limit {
		return 0, fmt.Errorf("idempotency: AddWrites: the writes%s come to about %d bytes, over the limit of %d (DynamoDB's 4 MB per transaction, less the completion): split the job, or keep large data elsewhere (such as S3) and write a reference to it: %w",
			forKey, size, limit, ErrInvalidWrites)
	}
	return size, nil
}

// checkWrite checks the shape of write i and returns its estimated size.
func checkWrite(i int, w *types.TransactWriteItem) (int, error) {
	kind, table, _ := describe(w)
	set := 0
	for _, ok := range []bool{w.Put != nil, w.Update != nil, w.Delete != nil, w.ConditionCheck != nil} {
		if ok {
			set++
		}
	}
	if set != 1 {
		return 0, fmt.Errorf("idempotency: AddWrites: write %d sets %d of Put, Update, Delete and ConditionCheck: set exactly one: %w", i, set, ErrInvalidWrites)
	}
	what := fmt.Sprintf("write %d (%s on table %s)", i, kind, table)
	if table == "" {
		return 0, fmt.Errorf("idempotency: AddWrites: write %d (%s) names no table: %w", i, kind, ErrInvalidWrites)
	}
	var size int
	switch {
	case w.Put != nil:
		if len(w.Put.Item) == 0 {
			return 0, fmt.Errorf("idempotency: AddWrites: %s has no Item: %w", what, ErrInvalidWrites)
		}
		size = itemSize(w.Put.Item)
		if size > maxItemSize {
			return 0, fmt.Errorf("idempotency: AddWrites: %s puts an item of about %d bytes, over DynamoDB's 400 KB item limit: keep large data elsewhere (such as S3) and write a reference to it: %w",
				what, size, ErrInvalidWrites)
		}
		size += exprSize(w.Put.ConditionExpression, w.Put.ExpressionAttributeNames, w.Put.ExpressionAttributeValues)
	case w.Update != nil:
		if w.Update.UpdateExpression == nil || *w.Update.UpdateExpression == "" {
			return 0, fmt.Errorf("idempotency: AddWrites: %s has no UpdateExpression: %w", what, ErrInvalidWrites)
		}
		size = itemSize(w.Update.Key) + len(*w.Update.UpdateExpression) +
			exprSize(w.Update.ConditionExpression, w.Update.ExpressionAttributeNames, w.Update.ExpressionAttributeValues)
	case w.Delete != nil:
		size = itemSize(w.Delete.Key) + exprSize(w.Delete.ConditionExpression, w.Delete.ExpressionAttributeNames, w.Delete.ExpressionAttributeValues)
	case w.ConditionCheck != nil:
		if w.ConditionCheck.ConditionExpression == nil || *w.ConditionCheck.ConditionExpression == "" {
			return 0, fmt.Errorf("idempotency: AddWrites: %s has no ConditionExpression: %w", what, ErrInvalidWrites)
		}
		size = itemSize(w.ConditionCheck.Key) + exprSize(w.ConditionCheck.ConditionExpression, w.ConditionCheck.ExpressionAttributeNames, w.ConditionCheck.ExpressionAttributeValues)
	}
	if w.Put == nil {
		if _, _, key := describe(w); len(key) == 0 {
			return 0, fmt.Errorf("idempotency: AddWrites: %s has no Key: %w", what, ErrInvalidWrites)
		}
	}
	return size, nil
}

// writeTables returns the tables of writes, each once, in order.
func writeTables(writes []types.TransactWriteItem) []string {
	var tables []string
	for i := range writes {
		if _, t, _ := describe(&writes[i]); t != "" && !slices.Contains(tables, t) {
			tables = append(tables, t)
		}
	}
	return tables
}

// describe returns the kind of write w is, its table, and its key (nil for
// a Put, whose key is among its attributes).
func describe(w *types.TransactWriteItem) (kind, table string, key map[string]types.AttributeValue) {
	switch {
	case w.Put != nil:
		return "Put", aws.ToString(w.Put.TableName), nil
	case w.Update != nil:
		return "Update", aws.ToString(w.Update.TableName), w.Update.Key
	case w.Delete != nil:
		return "Delete", aws.ToString(w.Delete.TableName), w.Delete.Key
	case w.ConditionCheck != nil:
		return "ConditionCheck", aws.ToString(w.ConditionCheck.TableName), w.ConditionCheck.Key
	}
	return "empty write", "", nil
}

func exprSize(cond *string, names map[string]string, values map[string]types.AttributeValue) int {
	n := len(aws.ToString(cond)) + itemSize(values)
	for k, v := range names {
		n += len(k) + len(v)
	}
	return n
}

// itemSize estimates the size DynamoDB counts for item: the lengths of its
// attribute names and values.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		return 3 + len(v.Value) + itemSize(v.Value)
	}
	return 0
}

// numberSize is DynamoDB's size of a number: about one byte per two
// significant digits, plus one.
func numberSize(s string) int {
	digits := 0
	for _, c := range s {
		if c >= '0' && c <= '9' {
			digits++
		}
	}
	return (digits+1)/2 + 1
}

// identity returns a string naming the item a key designates in table,
// equal for equal keys.
func identity(table string, key map[string]types.AttributeValue) string {
	names := make([]string, 0, len(key))
	for k := range key {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(strconv.Quote(table))
	for _, k := range names {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(k))
		b.WriteByte('=')
		switch v := key[k].(type) {
		case *types.AttributeValueMemberS:
			b.WriteString("S" + strconv.Quote(v.Value))
		case *types.AttributeValueMemberN:
			b.WriteString("N" + strconv.Quote(v.Value))
		case *types.AttributeValueMemberB:
			b.WriteString("B" + strconv.Quote(string(v.Value)))
		default:
			fmt.Fprintf(&b, "%T", v)
		}
	}
	return b.String()
}

// Commit is a claim's completion with the writes its handler added, as the
// Guard hands it to a WriteCommitter.
type Commit struct {
	// Key and Token are the claim's. An empty Key commits Writes alone,
	// for a handler run without a claim.
	Key, Token string
	// PayloadHash is the digest the claim was made with, for the record
	// returned.
	PayloadHash string
	// Result is saved with the record; nil saves none.
	Result []byte
	// Writes are the handler's, in the order it added them.
	Writes []types.TransactWriteItem
	// ID names the commit across its attempts: the Guard retries a commit
	// with the same ID and the same fields, and a store must apply it at
	// most once (DynamoStore sends it as the ClientRequestToken, which
	// DynamoDB remembers for 10 minutes). At most 36 characters.
	ID string
	// At is when the commit was first tried; the record's expiry counts
	// from it, so that every attempt is the same request.
	At time.Time
}

// WriteCommitter is a Store that commits a claim's completion together with
// the writes its handler added (see AddWrites), all or nothing. DynamoStore
// is one; the Guard finds the interface with a type assertion, so Stores
// without it still work, without AddWrites.
type WriteCommitter interface {
	// CommitWrites completes the claim of c.Key by c.Token, saving
	// c.Result, and applies c.Writes, in one transaction that holds only
	// if the claim is still c.Token's and in progress. It returns the
	// completed record (nil when c.Key is ""). When the claim is not
	// c.Token's it applies nothing and returns an error matching
	// ErrNotHolder; when a condition of c.Writes fails, it applies nothing
	// and returns a *TransactionCanceledError. An attempt repeating one
	// that was applied, although its caller never heard so, succeeds
	// without applying anything.
	CommitWrites(ctx context.Context, c Commit) (*Record, error)
}

// writeChecker is a WriteCommitter that checks writes beyond the limits
// every store shares.
type writeChecker interface {
	// checkWrites returns an error matching ErrInvalidWrites when all, the
	// writes of the claim of key ("" for none), cannot be committed.
	checkWrites(key string, all []types.TransactWriteItem) error
}

// TransactionCanceledError is the failure of a job whose writes (see
// AddWrites) DynamoDB refused for a reason of their own: a condition the
// handler wrote failed (a ConditionCheck, or a Put, Update or Delete with a
// ConditionExpression), or one of its items was invalid. Nothing was
// applied, the idempotency record was not completed, and the claim was
// released: the job fails with an error wrapping this one, and its retry
// runs the handler again, which suits optimistic locking (the retry reads
// the new version).
//
// When a failed condition is business logic (an account without the funds,
// an order already shipped), retrying will not change it: match the error
// with errors.As in a middleware outside the idempotency middleware, and
// turn it into sqsworker.Permanent (the dead-letter queue, with its
// reason), or into nil (acknowledge the message), as the case may be.
type TransactionCanceledError struct {
	// Key is the idempotency key of the job.
	Key string
	// Reasons has one entry per write the handler added, in the order it
	// added them: Code "None" for a write not at fault;
	// "ConditionalCheckFailed" for a failed condition, with Item holding
	// the item found when the write asked for it
	// (ReturnValuesOnConditionCheckFailure ALL_OLD); "ValidationError",
	// "ItemCollectionSizeLimitExceeded" and so on otherwise. Empty when
	// DynamoDB gave no reasons.
	Reasons []types.CancellationReason
	// Err is DynamoDB's error.
	Err error
}

func (e *TransactionCanceledError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "idempotency: DynamoDB cancelled the writes of key %q", e.Key)
	faults := 0
	for i, r := range e.Reasons {
		code := aws.ToString(r.Code)
		if code == "" || code == "None" {
			continue
		}
		if faults++; faults == 1 {
			b.WriteString(":")
		} else {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " write %d: %s", i, code)
		if msg := aws.ToString(r.Message); msg != "" {
			fmt.Fprintf(&b, " (%s)", msg)
		}
	}
	if faults == 0 && e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns DynamoDB's error.
func (e *TransactionCanceledError) Unwrap() error { return e.Err }

// ConditionFailed reports whether the condition of write i (in the order the
// handler added its writes) failed.
func (e *TransactionCanceledError) ConditionFailed(i int) bool {
	return i >= 0 && i < len(e.Reasons) && aws.ToString(e.Reasons[i].Code) == reasonConditionFailed
}

// Cancellation reason codes of DynamoDB.
const (
	reasonNone            = "None"
	reasonConditionFailed = "ConditionalCheckFailed"
	reasonValidation      = "ValidationError"
)

// WritesAdded returns how many writes have been added (AddWrites) to the
// commit of the handler run with ctx so far: 0 outside a handler run by the
// middleware. A middleware inside the idempotency middleware that must not
// act on a job whose writes may yet be refused at the commit checks it.
func WritesAdded(ctx context.Context) int {
	p, ok := ctx.Value(pendingKey{}).(*pending)
	if !ok {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.writes)
}
