package idempotency

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
)

// schemaTTL is how long a DynamoStore keeps the key schema of a table of the
// handlers' writes, or the failure to describe it, once described.
const schemaTTL = time.Minute

// keyElem is one attribute of a table's primary key: its name and type
// ("S", "N" or "B").
type keyElem struct{ name, typ string }

// tableKey is the primary key of a table of the handlers' writes, as
// DescribeTable gave it (the partition key first), or the failure to get
// it.
type tableKey struct {
	done chan struct{} // closed once key, err and at are set
	key  []keyElem
	err  error
	at   time.Time
}

// schemas caches the key schemas of the tables of the handlers' writes. A
// DynamoStore describes those tables only after DynamoDB refused a commit
// as invalid, to tell a table keyed otherwise than the writes' items (an
// operator's mistake) from writes at fault: never on a commit that
// succeeds. Each table is described once per schemaTTL, however many
// commits ask at once.
type schemas struct {
	mu sync.Mutex
	m  map[string]*tableKey
}

// key returns the key of table, describing it with api unless a
// description younger than schemaTTL (or one under way) answers. An outage
// is not kept: the next commit refused describes the table again.
func (c *schemas) key(ctx context.Context, api DynamoAPI, opts []func(*dynamodb.Options), table string, now time.Time) ([]keyElem, error) {
	c.mu.Lock()
	e := c.m[table]
	if e != nil && !e.stale(now) {
		c.mu.Unlock()
		select {
		case <-e.done:
			return e.key, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e = &tableKey{done: make(chan struct{})}
	if c.m == nil {
		c.m = map[string]*tableKey{}
	}
	c.m[table] = e
	c.mu.Unlock()
	e.key, e.err = describeKey(ctx, api, opts, table)
	e.at = now
	close(e.done)
	if e.err != nil && (isOutage(e.err) || errors.Is(e.err, context.Canceled)) {
		c.forget([]string{table})
	}
	return e.key, e.err
}

// stale reports whether e was described schemaTTL or more before now; one
// under way is not.
func (e *tableKey) stale(now time.Time) bool {
	select {
	case <-e.done:
		return now.Sub(e.at) >= schemaTTL
	default:
		return false
	}
}

// forget drops what is known of tables: refused for being missing or
// denied, they may come back keyed otherwise.
func (c *schemas) forget(tables []string) {
	c.mu.Lock()
	for _, t := range tables {
		delete(c.m, t)
	}
	c.mu.Unlock()
}

// describeKey returns the primary key of table, the partition key first.
func describeKey(ctx context.Context, api DynamoAPI, opts []func(*dynamodb.Options), table string) ([]keyElem, error) {
	out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table}, opts...)
	if err != nil {
		return nil, err
	}
	if out.Table == nil {
		return nil, fmt.Errorf("no description of table %s", table)
	}
	key := keyOf(out.Table)
	if len(key) == 0 {
		return nil, fmt.Errorf("table %s has no key schema in its description", table)
	}
	return key, nil
}

// keyOf returns the primary key t describes, the partition key first; an
// attribute without a definition has the type "".
func keyOf(t *types.TableDescription) []keyElem {
	typ := map[string]string{}
	for _, d := range t.AttributeDefinitions {
		typ[aws.ToString(d.AttributeName)] = string(d.AttributeType)
	}
	var key []keyElem
	for _, k := range t.KeySchema {
		e := keyElem{aws.ToString(k.AttributeName), typ[aws.ToString(k.AttributeName)]}
		if k.KeyType == types.KeyTypeHash {
			key = slices.Insert(key, 0, e)
		} else {
			key = append(key, e)
		}
	}
	return key
}

// keyMismatch returns how the key of w, a write on a table whose key is
// key, differs from it (what w's item carries), or "" when it fits.
func keyMismatch(w *types.TransactWriteItem, key []keyElem) string {
	_, _, k := describe(w)
	if k == nil && w.Put != nil {
		for _, e := range key {
			v, ok := w.Put.Item[e.name]
			if !ok {
				return "an item without the attribute " + e.name
			}
			if t := attrType(v); t != e.typ {
				return fmt.Sprintf("an item whose %s is of type %s", e.name, t)
			}
		}
		return ""
	}
	fits := len(k) == len(key)
	for _, e := range key {
		if v, ok := k[e.name]; !ok || attrType(v) != e.typ {
			fits = false
		}
	}
	if fits {
		return ""
	}
	carried := make([]keyElem, 0, len(k))
	for _, name := range slices.Sorted(maps.Keys(k)) {
		carried = append(carried, keyElem{name, attrType(k[name])})
	}
	return "the key " + formatKey(carried)
}

// formatKey writes a key as its attributes with their types: "id (S), at (N)".
func formatKey(key []keyElem) string {
	parts := make([]string, len(key))
	for i, e := range key {
		parts[i] = fmt.Sprintf("%s (%s)", e.name, e.typ)
	}
	return strings.Join(parts, ", ")
}

// attrType returns the DynamoDB type of v: "S", "N", "B", or another's
// name, which no key has.
func attrType(v types.AttributeValue) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return "S"
	case *types.AttributeValueMemberN:
		return "N"
	case *types.AttributeValueMemberB:
		return "B"
	case *types.AttributeValueMemberBOOL:
		return "BOOL"
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberL:
		return "L"
	case *types.AttributeValueMemberM:
		return "M"
	case *types.AttributeValueMemberSS:
		return "SS"
	case *types.AttributeValueMemberNS:
		return "NS"
	case *types.AttributeValueMemberBS:
		return "BS"
	}
	return fmt.Sprintf("%T", v)
}

// schemaUncheckedError wraps the error of a commit DynamoDB refused as
// invalid whose writes' tables could not be described (DescribeTable
// denied, say): the job's fault, as before the check, with a note. The
// Guard logs the note once.
type schemaUncheckedError struct {
	table string
	why   string // the DescribeTable error's text: not wrapped, not to be classified
	err   error
}

func (e *schemaUncheckedError) Error() string {
	return fmt.Sprintf("%v (the key of table %s could not be checked against the writes' items: %s)", e.err, e.table, e.why)
}

func (e *schemaUncheckedError) Unwrap() error { return e.err }

// describeFailure is a table of the writes that could not be described,
// and why.
type describeFailure struct {
	table string
	err   error
}

// checkKeys describes (see schemas.key) the tables of the writes that
// DynamoDB refused as invalid, those at is true for, and, when an item's
// key does not fit its table's key, returns the fix naming each such
// table, its key and the key the item carries, and those tables. It
// returns too a table that could not be described, if any: one that failed
// for an outage first.
func (s *DynamoStore) checkKeys(ctx context.Context, writes []types.TransactWriteItem, at func(i int) bool) (fix string, tables []string, failed *describeFailure) {
	var fixes []string
	type described struct {
		key []keyElem
		err error
	}
	known := map[string]described{} // each table described once, an outage's failure too
	for i := range writes {
		if !at(i) {
			continue
		}
		kind, table, _ := describe(&writes[i])
		if slices.Contains(tables, table) {
			continue
		}
		d, ok := known[table]
		if !ok {
			d.key, d.err = s.schemas.key(ctx, s.api, s.opts, table, s.now())
			known[table] = d
		}
		key, err := d.key, d.err
		if err != nil {
			if ok {
				continue // its failure already counted
			}
			if failed == nil || isOutage(err) && !isOutage(failed.err) {
				failed = &describeFailure{table, err}
			}
			continue
		}
		if got := keyMismatch(&writes[i], key); got != "" {
			tables = append(tables, table)
			fixes = append(fixes, fmt.Sprintf("table %s of the handler's writes (AddWrites) has the key %s, but write %d (%s) carries %s",
				table, formatKey(key), i, kind, got))
		}
	}
	if len(fixes) == 0 {
		return "", nil, failed
	}
	return strings.Join(fixes, "; ") + ": recreate the table with the key its items carry, or correct the handler's writes", tables, failed
}

// keysAtFault returns err, the error of c's commit, which DynamoDB refused
// as invalid (a ValidationException, or the writes at cancelled for a
// ValidationError; raw is DynamoDB's error), classified by the keys of the
// writes' tables (see checkKeys): a *WritesTableError naming the tables
// whose key an item does not fit, marked sqsworker.PartlyUnavailable; the
// same mark when a table could not be described for an outage (the job
// waits, to be checked again); else err, the job's fault, with a note when
// a table could not be described otherwise (DescribeTable denied, say).
func (s *DynamoStore) keysAtFault(ctx context.Context, c Commit, err, raw error, at func(i int) bool) error {
	fix, tables, failed := s.checkKeys(ctx, c.Writes, at)
	switch {
	case fix != "":
		return sqsworker.PartlyUnavailable(&WritesTableError{Tables: tables,
			Err: fmt.Errorf("idempotency: committing the writes of key %q: %w: %s: %w", c.Key, ErrMisconfigured, fix, raw)})
	case failed != nil && (isOutage(failed.err) || errors.Is(failed.err, context.Canceled)):
		return sqsworker.PartlyUnavailable(fmt.Errorf("idempotency: committing the writes of key %q: DynamoDB refused them as invalid, and describing table %s to check its key against the items failed (%v): %w",
			c.Key, failed.table, failed.err, raw))
	case failed != nil:
		return &schemaUncheckedError{table: failed.table, why: failed.err.Error(), err: err}
	}
	return err
}
