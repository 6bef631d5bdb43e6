package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/ctxsleep"
	"github.com/sqsworker/sqsworker/internal/jobkey"
	"github.com/sqsworker/sqsworker/internal/stopby"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/visibility"
)

// KeyAttribute is the message attribute the default key comes from. Producers
// set it to a key of the job's own (an order ID, a payment intent), which
// survives DLQ replays, SQS redrives and duplicate sends.
const KeyAttribute = jobkey.Attribute

// DefaultKey returns the key of a message: its KeyAttribute (a Binary one
// as "binary:" and its bytes in hex); else, for a message replayed from a
// dead-letter queue, the original message ID kept in its failure metadata;
// else its message ID. Message IDs change when SQS's own redrive moves a
// message, so producers that need duplicates of redriven messages
// recognised must set KeyAttribute.
func DefaultKey(m *sqsworker.Message) string { return jobkey.Of(m) }

// MaxPayloadHashSize is the longest digest of Config.PayloadHash stored as
// it is; a longer one is stored as its own hex SHA-256.
const MaxPayloadHashSize = 256

// storedHash returns the digest h as it is stored and compared: h, or the
// hex SHA-256 of h when h is not valid UTF-8 or is over
// MaxPayloadHashSize bytes.
func storedHash(h string) string {
	if utf8.ValidString(h) && len(h) <= MaxPayloadHashSize {
		return h
	}
	sum := sha256.Sum256([]byte(h))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// BodyHash returns the hex SHA-256 of the message body: the default payload
// check, which tells a reused key from a duplicate.
func BodyHash(m *sqsworker.Message) string {
	sum := sha256.Sum256([]byte(m.Body))
	return hex.EncodeToString(sum[:])
}

// MissingKey says what happens to a message whose key is empty.
type MissingKey int

const (
	// RejectMissingKey fails the message with a Permanent error: it goes to
	// the dead-letter queue. The default.
	RejectMissingKey MissingKey = iota
	// RunWithoutKey runs the handler without idempotency; the writes it
	// adds with AddWrites are committed on their own.
	RunWithoutKey
)

// Config configures the idempotency middleware. The zero value of each field
// means its documented default.
type Config struct {
	// Key returns the idempotency key of a message: valid UTF-8, at most
	// MaxKeySize bytes (encode a digest as hex, for instance). Default
	// DefaultKey.
	Key func(*sqsworker.Message) string
	// PayloadHash returns a digest of what the key stands for; the same
	// key with another digest is a Permanent error. Default BodyHash;
	// return "" to skip the check. A digest that is not valid UTF-8 (raw
	// hash bytes) or is over MaxPayloadHashSize bytes is stored as the hex
	// SHA-256 of itself: DynamoDB would store the first altered, and never
	// equal to itself again, and the second could put the record over
	// DynamoDB's item size.
	PayloadHash func(*sqsworker.Message) string
	// MissingKey says what an empty key does. Default RejectMissingKey.
	MissingKey MissingKey
	// Lease is how long a claim holds when the handler's context carries
	// neither a visibility lease nor a deadline. Default 5m. With a
	// visibility lease (the worker's heartbeat) the claim follows it.
	// ClaimGrace is added in every case.
	Lease time.Duration
	// ClaimGrace is how long a claim outlasts the message's visibility
	// deadline (or the context's deadline, or Lease): the time a holder
	// has to extend its claim when DynamoDB fails for a while, since the
	// extensions are retried until the claim's lease ends. A duplicate of
	// a job whose holder died waits that much longer, but for the
	// message's own next receive on a FIFO queue, with the heartbeat,
	// which takes the claim over sooner (see Receive); such a claim is
	// given up sooner too, should its extensions fail. When the claim's
	// lease ends without a successful extension, or another holder has
	// taken the key, the handler's context is cancelled with a cause
	// matching ErrNotHolder. Default 30s; at most 12h.
	ClaimGrace time.Duration
	// CacheSize keeps the records of up to this many completed keys in
	// memory, so that their duplicates cost no request: the cached record
	// answers a duplicate exactly as the store's would, payload check and
	// saved result included, until it expires. A record whose result is
	// over 16 KiB is not cached when OnDuplicate is set (it would need the
	// result). With a Store other than a DynamoStore, whose records' expiry
	// the Guard cannot know, only the records a Claim returned are cached,
	// not the Guard's own completions. Default 0: off.
	CacheSize int
	// MaxResultSize is the largest result saved with a record; a larger one
	// is dropped (and logged) rather than failing the job. Default 300 KiB,
	// within DynamoDB's 400 KB item limit.
	MaxResultSize int
	// OnDuplicate, if set, runs for a duplicate of a completed key, with
	// its record (and saved result); its error becomes the message's.
	// Default: the duplicate is acknowledged.
	OnDuplicate func(ctx context.Context, m *sqsworker.Message, r *Record) error
	// Disabled turns idempotency off: the handler runs for every message,
	// and the writes it adds with AddWrites are committed on their own.
	// For local debugging.
	Disabled bool
	// Logger receives lost claims and store failures. Default
	// slog.Default().
	Logger *slog.Logger
	// Metrics counts duplicates acknowledged without running the handler
	// (metrics.IdempotentDuplicates, by queue). Default none.
	Metrics metrics.Recorder
}

// maxItemSize is DynamoDB's limit on an item's size.
const maxItemSize = 400 << 10

// Defaults of Config.
const (
	DefaultLease         = 5 * time.Minute
	DefaultClaimGrace    = 30 * time.Second
	DefaultMaxResultSize = 300 << 10
)

// maxClaimGrace is the largest Config.ClaimGrace: SQS's longest visibility
// timeout.
const maxClaimGrace = sqsworker.MaxVisibilityTimeout

// Stats counts what the middleware did.
type Stats struct {
	Claimed        int64 // keys claimed: the handler ran
	Duplicates     int64 // duplicates of completed keys, not run
	CacheHits      int64 // of which answered from the in-memory cache
	InProgress     int64 // duplicates postponed while another holder runs
	Waited         int64 // messages that waited for a handler of their key in this process to finish before their claim
	PayloadChanged int64 // keys reused with another payload
	MissingKeys    int64 // messages without a key
	Released       int64 // claims released after a handler failure, or a commit that was cancelled or failed
	StoreErrors    int64 // store requests that failed
	LostClaims     int64 // claims lost while their handler ran (its context was cancelled), or before its writes were committed
	Committed      int64 // completions committed in one transaction with the handler's writes (AddWrites)
	Cancelled      int64 // transactions cancelled by the handler's own writes (TransactionCanceledError)
}

// Guard makes a handler's effect happen once per idempotency key. Create one
// with New; its Middleware method wraps handlers.
type Guard struct {
	store Store
	cfg   Config
	cache *lru
	now   func() time.Time

	claimed, duplicates, cacheHits, inProgress, payloadChanged,
	missing, released, storeErrors, lostClaims, committed, cancelled atomic.Int64

	// misconfigured is true, for claims and for commits of the handlers'
	// writes each (misClaim, misCommit), from a request refused for the
	// store's configuration (ErrMisconfigured) until the next successful
	// request of the same kind: the error is logged once, not for every
	// job. The two are apart: claims that succeed say nothing of commits
	// refused on the writes' tables.
	misconfigured [2]atomic.Bool

	// misTablesMu guards misTables: the tables of the handlers' writes
	// whose commits were refused for their configuration
	// (WritesTableError), until a commit with a write on them succeeds.
	// Each is logged once: jobs writing to other tables (other tenants')
	// succeed meanwhile, and say nothing of these.
	misTablesMu sync.Mutex
	misTables   map[string]bool
	// anyMisTables is set while misTables is not empty, so that a commit
	// that succeeds, the usual case, looks at nothing more.
	anyMisTables atomic.Bool
	// keysUnchecked is set once a commit refused as invalid could not have
	// the keys of its writes' tables checked (DescribeTable denied, say):
	// logged once.
	keysUnchecked atomic.Bool

	// runningMu guards running: the keys this Guard's handlers are
	// handling (see enter).
	runningMu sync.Mutex
	running   map[string]*running
	waited    atomic.Int64
	localWait time.Duration // see the constant
}

// New validates cfg and returns a Guard over store.
func New(store Store, cfg Config) (*Guard, error) {
	var errs []error
	if store == nil && !cfg.Disabled {
		errs = append(errs, errors.New("nil Store"))
	}
	if cfg.Lease < 0 {
		//lint:ignore ST1005 the message starts with the name of the field
		errs = append(errs, fmt.Errorf("Lease %s is negative", cfg.Lease))
	}
	if cfg.ClaimGrace < 0 || cfg.ClaimGrace > maxClaimGrace {
		errs = append(errs, fmt.Errorf("ClaimGrace %s is outside 0..%s", cfg.ClaimGrace, maxClaimGrace))
	}
	if cfg.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("CacheSize %d is negative", cfg.CacheSize))
	}
	if cfg.MaxResultSize < 0 || cfg.MaxResultSize > maxItemSize {
		errs = append(errs, fmt.Errorf("MaxResultSize %d is outside 0..%d (DynamoDB's item limit)", cfg.MaxResultSize, maxItemSize))
	}
	if cfg.MissingKey != RejectMissingKey && cfg.MissingKey != RunWithoutKey {
		errs = append(errs, fmt.Errorf("MissingKey %d is unknown", cfg.MissingKey))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("idempotency: invalid Config: %w", errors.Join(errs...))
	}
	if cfg.Key == nil {
		cfg.Key = DefaultKey
	}
	if cfg.PayloadHash == nil {
		cfg.PayloadHash = BodyHash
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.ClaimGrace == 0 {
		cfg.ClaimGrace = DefaultClaimGrace
	}
	if cfg.MaxResultSize == 0 {
		cfg.MaxResultSize = DefaultMaxResultSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.Nop{}
	}
	g := &Guard{store: store, cfg: cfg, now: time.Now, localWait: localWait}
	if cfg.CacheSize > 0 {
		g.cache = newLRU(cfg.CacheSize)
	}
	return g, nil
}

// Middleware returns a sqsworker.Middleware that makes handlers idempotent
// with store; see Guard.Middleware.
func Middleware(store Store, cfg Config) (sqsworker.Middleware, error) {
	g, err := New(store, cfg)
	if err != nil {
		return nil, err
	}
	return g.Middleware, nil
}

// Stats returns the Guard's counters.
func (g *Guard) Stats() Stats {
	return Stats{
		Claimed: g.claimed.Load(), Duplicates: g.duplicates.Load(), CacheHits: g.cacheHits.Load(),
		InProgress: g.inProgress.Load(), PayloadChanged: g.payloadChanged.Load(), MissingKeys: g.missing.Load(),
		Released: g.released.Load(), StoreErrors: g.storeErrors.Load(), LostClaims: g.lostClaims.Load(),
		Committed: g.committed.Load(), Cancelled: g.cancelled.Load(), Waited: g.waited.Load(),
	}
}

type resultKey struct{}

// SetResult saves result with the record of the message whose handler runs
// with ctx, when the handler succeeds. OnDuplicate gets it back. It does
// nothing outside the middleware.
func SetResult(ctx context.Context, result []byte) {
	if p, ok := ctx.Value(resultKey{}).(*[]byte); ok {
		*p = result
	}
}

// Middleware wraps next so that it runs once per key:
//
//   - a new key, or one whose record expired or whose claim's lease ran out,
//     is claimed and next runs; on success the record is completed (in one
//     transaction with the writes next added with AddWrites, if any), on
//     failure it is released so that the retry can claim it again;
//   - a duplicate of a completed key is acknowledged without running next
//     (or handed to Config.OnDuplicate), whether the store or the in-memory
//     cache answers;
//   - a duplicate of a key another holder is running is postponed until that
//     claim's lease ends, with sqsworker.RetryAfter and a nil error, which the
//     runtimes do not count as a failure; a message whose key a handler of
//     the same Guard is handling (two copies in one batch, or a send retried
//     after its reply was lost: one Guard per process sees them all) first
//     waits for it, until 5s after it started
//     (and for no more than half of the time left to its context's
//     deadline), and is then acknowledged, or runs if that handler failed
//     (Stats.Waited); a job still running by then postpones it as above;
//   - a key reused with another payload, over MaxKeySize bytes or not valid
//     UTF-8, is a Permanent error naming the key or the limit;
//   - when the store cannot be reached, or has not answered the claim
//     within 5s (SDK retries included), next does not run and the message
//     is retried; a DynamoStore's outages (network errors, timeouts, 5xx,
//     throttling) come back marked sqsworker.Unavailable, which the
//     runtimes' circuit breaker counts and never dead-letters; so do the
//     requests DynamoDB refuses for the store's configuration (the table
//     missing, access denied, a key schema that does not fit: see
//     ErrMisconfigured), logged once as an error saying what to fix.
//
// next's context carries the key (KeyFromContext) and collects its writes
// (AddWrites).
//
// The claim holds until the message's visibility deadline (with the
// worker's heartbeat; else the context's deadline, else Config.Lease) plus
// Config.ClaimGrace, and moves with every visibility extension. Failed lease
// extensions are retried with backoff, apart from the handler, until the
// claim's lease ends. When the claim is lost (another holder has the key, or
// its lease ended without an extension), next's context is cancelled with a
// cause matching ErrNotHolder: the job may run elsewhere. When it was lost
// to an outage, next's error (or, if next went on and returned nil, the
// refusal of its writes' commit) is returned marked sqsworker.Unavailable.
//
// Completing or releasing the claim, or committing next's writes with the
// completion, is retried with backoff for up to 30s, never past the claim's
// lease: a claim left in progress would postpone its duplicates until its
// lease ends, then let them run again. In a Lambda invocation (the lambda
// package's handlers), nor does it go past the handlers' deadline, or 250ms
// after next returned if that is later: a Lambda function must report its
// batch before its own deadline. In the worker it outlives the handler
// context's deadline, which bounds the handler, not the process. A
// completion without writes that
// still fails is logged, and the message acknowledged all the same (the
// effect happened). A commit that still fails applied nothing, or applied
// everything and completed the record; the claim is released (a completed
// record is kept) and the job fails, marked sqsworker.Unavailable for an
// outage: its retry runs, or is acknowledged as a duplicate.
func (g *Guard) Middleware(next sqsworker.Handler) sqsworker.Handler {
	if g.cfg.Disabled {
		if _, ok := g.store.(WriteCommitter); !ok {
			return next
		}
		return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			return g.runUnclaimed(ctx, m, next)
		})
	}
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return g.handle(ctx, m, next)
	})
}

func (g *Guard) handle(ctx context.Context, m *sqsworker.Message, next sqsworker.Handler) error {
	key := g.cfg.Key(m)
	if key == "" {
		g.missing.Add(1)
		if g.cfg.MissingKey == RunWithoutKey {
			return g.runUnclaimed(ctx, m, next)
		}
		return sqsworker.Permanent(fmt.Errorf("idempotency: message %s has no idempotency key (set the %q attribute)", m.ID, KeyAttribute))
	}
	if len(key) > MaxKeySize {
		return sqsworker.Permanent(fmt.Errorf("idempotency: message %s: its idempotency key is %d bytes, over the limit of %d: use a shorter key (the hex digest of a long one, for instance)",
			m.ID, len(key), MaxKeySize))
	}
	if !utf8.ValidString(key) {
		// DynamoDB would store every invalid byte as U+FFFD: two keys
		// would share one record.
		return sqsworker.Permanent(fmt.Errorf("idempotency: message %s: its idempotency key is not valid UTF-8: encode binary keys (hex or base64)", m.ID))
	}
	if outer, ok := ctx.Value(pendingKey{}).(*pending); ok && outer.key == key && sameStore(outer.store, g.store) {
		// Nested in a middleware that holds this key's claim in the same
		// records (a Guard in its own chain twice): that claim covers
		// this run, and its writes. A claim of its own would find it, and
		// postpone the job for as long as the outer one failed for it.
		return next.HandleMessage(ctx, m)
	}
	now := g.now()
	hash := storedHash(g.cfg.PayloadHash(m))
	if g.cache != nil {
		if r, ok := g.cache.get(key, now); ok {
			return g.duplicate(ctx, m, key, hash, r, now, true, Receive{})
		}
	}
	r, waited, err := g.enter(ctx, key)
	defer g.leave(key, r)
	if err != nil {
		// Stopped while waiting for a handler of the key here: not a
		// failure of the job's, nor of the store's.
		return fmt.Errorf("idempotency: message %s stopped waiting for the handler of key %q in this process: %w", m.ID, key, err)
	}
	if r == nil || waited {
		now = g.now()
	}
	if waited && r != nil {
		g.waited.Add(1)
		if g.cache != nil {
			if r, ok := g.cache.get(key, now); ok {
				return g.duplicate(ctx, m, key, hash, r, now, true, Receive{})
			}
		}
	}
	lease := visibility.FromContext(ctx)
	var (
		leaseUntil time.Time
		by         Receive
		token      string
	)
	for try := 0; ; try++ {
		leaseUntil, by = g.leaseUntil(ctx, lease, now), g.fifoReceive(m, lease, now)
		// Bounded as every other request of the claim's: a DynamoDB that
		// accepts the request and never answers would otherwise hold the
		// message (kept invisible by its heartbeat) for as long, unseen by
		// the circuit breaker.
		cctx, cancelClaim := context.WithTimeout(ctx, attemptTimeout)
		var existing *Record
		var err error
		token, existing, err = g.store.Claim(cctx, key, hash, leaseUntil, by)
		cancelClaim()
		if err != nil {
			g.storeErrors.Add(1)
			if isConflict(err) {
				// A transaction is completing the record: its holder
				// is committing. Come back when it is done.
				g.inProgress.Add(1)
				return sqsworker.RetryAfter(time.Second, nil)
			}
			g.noteMisconfigured(misClaim, err)
			return err
		}
		g.noteUsable(misClaim)
		if existing == nil {
			break
		}
		// An earlier receive of this message holds the key, to be taken
		// over within its holder's LossLag and a second (see Receive):
		// wait for it here, with the message held by the heartbeat, once.
		// Postponed, the message would spend a receive coming back. The
		// holder's LossLag is not recorded: the longer of this Guard's
		// LossLag and ClaimGrace bounds the wait, so that a holder whose
		// heartbeat lags more than this one's is waited for too.
		wait, soon := takeOverWait(existing, by)
		if try > 0 || !soon || wait > max(lease.LossLag(), g.cfg.ClaimGrace)+clockSkew+time.Second || !ctxsleep.Sleep(ctx, wait) {
			return g.duplicate(ctx, m, key, hash, existing, now, false, by)
		}
		now = g.now()
	}
	g.claimed.Add(1)
	log := g.cfg.Logger.With("message_id", m.ID, "idempotency_key", key)

	// Keep the claim's lease in step with the message's visibility, and
	// cancel the handler if the claim is lost.
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var early time.Duration
	if by.MessageID != "" {
		// Should its extensions fail, the claim is given up LossLag past
		// its visibility deadline, before its next receive takes it
		// over, not at the end of the grace: by the Grace it records.
		early = by.Grace
	}
	k := g.startKeeper(ctx, key, token, leaseUntil, early, cancel, log)
	if lease != nil {
		lease.OnExtend(k.extendTo)
		// An extension made while the claim was being made, whose
		// hook ran before there was one.
		k.extendTo(lease.Deadline())
	}
	var result []byte
	p := &pending{key: key, store: g.store}
	p.wc, _ = g.store.(WriteCommitter)
	herr := call(context.WithValue(context.WithValue(hctx, resultKey{}, &result), pendingKey{}, p), next, m)
	writes, size, refused := p.seal()
	held := k.stop()

	fctx, deadline, endFinish := g.finishing(ctx, held)
	defer endFinish()
	if herr == nil && refused != nil {
		// The handler ignored AddWrites' refusal: completing without the
		// writes would lose its effect for good.
		herr = refused
	}
	if herr != nil {
		// The handler stopped for its claim's loss, perhaps.
		herr = lostTo(hctx, herr)
		g.release(fctx, deadline, key, token, log)
		return herr
	}
	if len(result) > g.cfg.MaxResultSize {
		log.Warn("result too large to save; completing without it", "bytes", len(result), "max", g.cfg.MaxResultSize)
		result = nil
	}
	if len(writes) > 0 {
		err := g.commit(fctx, deadline, Commit{Key: key, Token: token, PayloadHash: hash, Result: result, Writes: writes}, size, log)
		if errors.Is(err, ErrNotHolder) {
			// Another holder has the key (this one's lease ended while
			// the handler ran, and another receive claimed it): none of
			// the writes applied. Lost to an outage, the claim's loss
			// says so (Unavailable). Otherwise the job is not at fault
			// either, and its last receive must not dead-letter a job
			// another holder runs: PartlyUnavailable spends no attempt,
			// and the breaker does not count it. The job comes back, to
			// find the key completed (acknowledged), held (put off) or
			// free (run).
			if lost := lostTo(hctx, err); sqsworker.IsUnavailable(lost) {
				return lost
			}
			return sqsworker.PartlyUnavailable(err)
		}
		return err
	}
	rec, err := g.complete(fctx, deadline, key, token, hash, result)
	if err != nil && result != nil && !retryable(err) && !errors.Is(err, ErrNotHolder) && !errors.Is(err, errNoTime) {
		// Perhaps the item was too large with the result: save none.
		log.Warn("completing with the result failed; completing without it", "error", err)
		rec, err = g.complete(fctx, deadline, key, token, hash, nil)
	}
	if err != nil {
		// The effect happened: acknowledge the message anyway. A duplicate
		// arriving before the claim's lease ends is postponed, after it
		// may run again.
		log.Error("completing the idempotency record failed; a duplicate may run again", "error", err)
		return nil
	}
	g.remember(rec)
	return nil
}

// Kinds of requests whose misconfiguration is noted apart (see
// Guard.misconfigured).
const (
	misClaim  = 0 // claims
	misCommit = 1 // commits of the handlers' writes
)

// noteMisconfigured logs err, the failure of a request of kind (misClaim,
// misCommit), when it matches ErrMisconfigured, as an error naming the
// problem and its fix, once until a request of that kind succeeds again:
// every job fails the same way meanwhile.
func (g *Guard) noteMisconfigured(kind int, err error) {
	if !errors.Is(err, ErrMisconfigured) || g.misconfigured[kind].Swap(true) {
		return
	}
	g.cfg.Logger.Error("idempotency store misconfigured: jobs fail as a dependency down (the circuit breaker opens, nothing is dead-lettered for it) until it is fixed",
		"error", err)
}

// noteUsable logs that requests of kind (misClaim, misCommit) succeed again
// after a misconfiguration.
func (g *Guard) noteUsable(kind int) {
	if g.misconfigured[kind].Load() && g.misconfigured[kind].Swap(false) {
		g.cfg.Logger.Info("idempotency store answers again: jobs run")
	}
}

// noteMisconfiguredWrites is noteMisconfigured for a commit: a refusal of
// tables of the handler's writes (WritesTableError) is logged once per
// table, until a commit with a write on it succeeds; any other, once for
// all commits.
func (g *Guard) noteMisconfiguredWrites(err error) {
	var wt *WritesTableError
	if !errors.As(err, &wt) {
		g.noteMisconfigured(misCommit, err)
		return
	}
	g.misTablesMu.Lock()
	known := true
	for _, t := range wt.Tables {
		if !g.misTables[t] {
			known = false
			if g.misTables == nil {
				g.misTables = map[string]bool{}
			}
			g.misTables[t] = true
		}
	}
	g.anyMisTables.Store(true)
	g.misTablesMu.Unlock()
	if known {
		return
	}
	g.cfg.Logger.Error("table of the handlers' writes misconfigured: the jobs that write to it fail as a dependency down (nothing is dead-lettered for it) until it is fixed; jobs writing to other tables run",
		"tables", strings.Join(wt.Tables, ", "), "error", err)
}

// noteTablesUsable logs that commits with writes on the tables of writes
// succeed again, for those that were refused for their configuration.
func (g *Guard) noteTablesUsable(writes []types.TransactWriteItem) {
	if !g.anyMisTables.Load() {
		return
	}
	g.misTablesMu.Lock()
	var back []string
	for _, t := range writeTables(writes) {
		if g.misTables[t] {
			delete(g.misTables, t)
			back = append(back, t)
		}
	}
	g.anyMisTables.Store(len(g.misTables) > 0)
	g.misTablesMu.Unlock()
	if len(back) > 0 {
		g.cfg.Logger.Info("table of the handlers' writes answers again: the jobs that write to it run", "tables", strings.Join(back, ", "))
	}
}

// noteKeysUnchecked logs, once, that err is a commit refused as invalid
// whose writes' tables could not be described to check their keys: such a
// job fails as its own fault, as it did before the check, and a table keyed
// otherwise than its items (an operator's mistake) cannot be told from it.
func (g *Guard) noteKeysUnchecked(err error) {
	var uc *schemaUncheckedError
	if !errors.As(err, &uc) || g.keysUnchecked.Swap(true) {
		return
	}
	g.cfg.Logger.Warn("cannot check the key of a table of the handlers' writes after DynamoDB refused them as invalid: such jobs fail as their own fault (counted toward the dead-letter queue), even when the table is keyed otherwise than the items; grant the role dynamodb:DescribeTable on the tables of the writes",
		"table", uc.table, "describe_error", uc.why)
}

// finishing returns the context and the deadline of the requests that
// finish a claim (complete, commit, release) whose lease ends at held (zero:
// no claim, writes committed alone), for a handler that ran with ctx: they
// outlive ctx's cancellation, are retried for up to finishBudget and never
// past the lease, and, in a Lambda invocation, end by its handlers'
// deadline (Lambda stops the function shortly after), or stopby.Late
// from now if that is later. Elsewhere ctx's deadline bounds the handler, not
// the process: a worker's completion outlives it, so that a handler done
// just in time does not leave its claim in progress. Call the function
// returned once they are done.
func (g *Guard) finishing(ctx context.Context, held time.Time) (context.Context, time.Time, context.CancelFunc) {
	now := g.now()
	deadline := now.Add(finishBudget)
	if !held.IsZero() {
		deadline = earliest(deadline, held)
	}
	fctx := context.WithoutCancel(ctx)
	end, ok := stopby.End(ctx, now)
	if !ok {
		return fctx, deadline, func() {}
	}
	fctx, cancel := context.WithDeadline(fctx, end)
	return fctx, earliest(deadline, end), cancel
}

// lostTo returns err, the failure of a job whose handler ran with hctx,
// marked sqsworker.Unavailable when the job's claim was lost to a store
// outage (hctx cancelled with such a cause, see keeper): the job is not at
// fault, and must not be dead-lettered for it.
func lostTo(hctx context.Context, err error) error {
	if cause := context.Cause(hctx); errors.Is(cause, ErrNotHolder) && sqsworker.IsUnavailable(cause) && !sqsworker.IsUnavailable(err) {
		return fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// release releases the claim of a handler that failed, retrying until
// deadline.
func (g *Guard) release(ctx context.Context, deadline time.Time, key, token string, log *slog.Logger) {
	g.released.Add(1)
	err := g.retry(ctx, deadline, func(ctx context.Context) error { return g.store.Release(ctx, key, token) })
	switch {
	case errors.Is(err, ErrNotHolder):
		log.Info("the idempotency claim was no longer held (or was completed) when its handler failed", "error", err)
	case err != nil:
		log.Warn("releasing the idempotency claim failed; the retry waits for its lease to end", "error", err)
	}
}

// commit commits the claim's completion with the handler's writes, which
// come to size bytes, retrying until deadline, and returns the job's
// outcome.
func (g *Guard) commit(ctx context.Context, deadline time.Time, c Commit, size int, log *slog.Logger) error {
	wc := g.store.(WriteCommitter) // AddWrites accepted writes: the store is one
	if c.Result != nil && size+len(c.Result)+len(c.Key)+completionSize > MaxTransactionSize {
		log.Warn("result too large to save with the writes in one transaction; completing without it",
			"bytes", len(c.Result), "writes_bytes", size, "max", MaxTransactionSize)
		c.Result = nil
	}
	c.ID, c.At = newToken(), g.now()
	rec, err := g.commitRetried(ctx, deadline, wc, c)
	if c.Result != nil && (errors.Is(err, errRecordRefused) || isValidation(err) && !errors.Is(err, ErrMisconfigured)) {
		// Perhaps the record was too large with the result: save none.
		log.Warn("committing with the result failed; committing without it", "error", err)
		c.Result, c.ID = nil, newToken()
		rec, err = g.commitRetried(ctx, deadline, wc, c)
	}
	g.noteKeysUnchecked(err)
	var cancelled *TransactionCanceledError
	switch {
	case errors.Is(err, ErrMisconfigured):
		// Marked Unavailable by the store: the job waits for the fix.
		g.noteMisconfiguredWrites(err)
		g.release(ctx, deadline, c.Key, c.Token, log)
		return err
	case err == nil:
		g.committed.Add(1)
		g.noteUsable(misCommit)
		g.noteTablesUsable(c.Writes)
		g.remember(rec)
		return nil
	case errors.Is(err, ErrNotHolder):
		// Another holder has the key: the writes were not applied, and
		// the job's retry finds the key completed, held or free.
		g.lostClaims.Add(1)
		log.Warn("the idempotency claim was lost before its writes were committed; none applied", "error", err)
		return err
	case errors.As(err, &cancelled):
		g.cancelled.Add(1)
		g.release(ctx, deadline, c.Key, c.Token, log)
		return err
	case errors.Is(err, errNoTime):
		// Not sent: nothing applied. The claim holds until its lease
		// ends (no time to release it either).
		log.Error("the writes were not committed: no time was left", "error", err)
		return err
	case retryable(err):
		// Unknown outcome: perhaps committed, whose record says so to the
		// retry; or not, and the claim is released (the condition on its
		// status keeps a committed record) so that the retry runs at
		// once rather than after the lease.
		log.Error("committing the writes with the idempotency record failed; the job will be retried", "error", err)
		g.release(ctx, time.Time{}, c.Key, c.Token, log)
		if !sqsworker.IsUnavailable(err) && isOutage(err) {
			err = sqsworker.Unavailable(err)
		}
		return err
	default:
		log.Error("DynamoDB refused the writes with the idempotency record", "error", err)
		g.release(ctx, deadline, c.Key, c.Token, log)
		return err
	}
}

// commitRetried commits c, retrying until deadline.
func (g *Guard) commitRetried(ctx context.Context, deadline time.Time, wc WriteCommitter, c Commit) (*Record, error) {
	var rec *Record
	err := g.retry(ctx, deadline, func(ctx context.Context) error {
		r, err := wc.CommitWrites(ctx, c)
		rec = r
		return err
	})
	return rec, err
}

// isValidation reports whether DynamoDB refused a request as invalid.
func isValidation(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ValidationException"
}

// runUnclaimed runs next for a message without a claim (RunWithoutKey, or
// Config.Disabled): the writes it adds are committed on their own.
// call runs next, recovering a panic into a *sqsworker.PanicError as the
// runtimes do, so that a panicking handler's claim is released like a
// failed one's instead of being held until its lease ends.
func call(ctx context.Context, next sqsworker.Handler, m *sqsworker.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &sqsworker.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return next.HandleMessage(ctx, m)
}

func (g *Guard) runUnclaimed(ctx context.Context, m *sqsworker.Message, next sqsworker.Handler) error {
	wc, ok := g.store.(WriteCommitter)
	if !ok {
		return next.HandleMessage(ctx, m)
	}
	p := &pending{wc: wc}
	herr := next.HandleMessage(context.WithValue(ctx, pendingKey{}, p), m)
	writes, _, refused := p.seal()
	switch {
	case herr != nil:
		return herr
	case refused != nil:
		return refused
	case len(writes) == 0:
		return nil
	}
	c := Commit{Writes: writes, ID: newToken(), At: g.now()}
	fctx, deadline, endFinish := g.finishing(ctx, time.Time{})
	defer endFinish()
	_, err := g.commitRetried(fctx, deadline, wc, c)
	if err == nil {
		g.committed.Add(1)
	}
	return err
}

// recordCompleter is a Store whose Complete can also return the record it
// leaves, as Claim would return it to a duplicate.
type recordCompleter interface {
	completeRecord(ctx context.Context, key, token, payloadHash string, result []byte) (*Record, error)
}

// complete completes the claim, retrying until deadline, and returns the
// completed record.
func (g *Guard) complete(ctx context.Context, deadline time.Time, key, token, hash string, result []byte) (*Record, error) {
	var rec *Record
	err := g.retry(ctx, deadline, func(ctx context.Context) error {
		if rc, ok := g.store.(recordCompleter); ok {
			r, err := rc.completeRecord(ctx, key, token, hash, result)
			rec = r
			return err
		}
		if err := g.store.Complete(ctx, key, token, result); err != nil {
			return err
		}
		// What the store wrote, as well as the Guard can tell: not when
		// it expires, for a Store of its own (its TTL is its own), so
		// that the record is not cached past it (see remember).
		rec = &Record{Key: key, Status: StatusCompleted, Token: token, PayloadHash: hash, Result: result}
		if ttl, ok := storeTTL(g.store); ok {
			rec.Expiry = time.Unix(g.now().Add(ttl).Unix(), 0)
		}
		return nil
	})
	return rec, err
}

// remember caches the record of a completed key, with its result when
// OnDuplicate may need it.
func (g *Guard) remember(r *Record) {
	if g.cache == nil || r == nil || r.Status != StatusCompleted || r.Expiry.IsZero() {
		return
	}
	switch {
	case g.cfg.OnDuplicate == nil:
		c := *r
		c.Result = nil // nobody will see it
		r = &c
	case len(r.Result) > maxCachedResult:
		g.cache.remove(r.Key) // its duplicates read it from the store
		return
	}
	g.cache.add(r)
}

// duplicate handles a key that another record holds, r, from the store or
// the cache; by is the Receive the claim was made by.
func (g *Guard) duplicate(ctx context.Context, m *sqsworker.Message, key, hash string, r *Record, now time.Time, cached bool, by Receive) error {
	if hash != "" && r.PayloadHash != "" && hash != r.PayloadHash {
		g.payloadChanged.Add(1)
		return sqsworker.Permanent(fmt.Errorf("idempotency: key %q was used for another payload", key))
	}
	if r.Status != StatusCompleted && r.Status != StatusInProgress {
		// Another kind of item under the same key (the batch package's,
		// sharing the table): not a claim that ends, and not this job's.
		return sqsworker.Permanent(fmt.Errorf("idempotency: key %q is held by an item that is not an idempotency record (status %q): another user of the table writes the same keys; give this store a KeyPrefix of its own", key, r.Status))
	}
	if r.Status == StatusCompleted {
		g.duplicates.Add(1)
		if cached {
			g.cacheHits.Add(1)
		} else {
			g.remember(r)
		}
		g.cfg.Metrics.Add(metrics.IdempotentDuplicates, 1, metrics.Dims{Queue: metrics.QueueName(m.QueueURL)})
		if g.cfg.OnDuplicate != nil {
			return g.cfg.OnDuplicate(ctx, m, r)
		}
		return nil
	}
	g.inProgress.Add(1)
	wait := r.LeaseExpiry.Sub(now)
	if w, soon := takeOverWait(r, by); soon {
		wait = min(wait, w) // taken over sooner, by a receive then
	}
	return sqsworker.RetryAfter(max(wait, time.Second), nil)
}

// takeOverWait returns how long until by may take over r, and whether r is
// the claim of an earlier receive of by's message, which by takes over
// sooner than r's lease ends (see Receive).
func takeOverWait(r *Record, by Receive) (time.Duration, bool) {
	if by.MessageID == "" || r.Status != StatusInProgress || r.Holder.MessageID != by.MessageID || r.Holder.Count >= by.Count {
		return 0, false
	}
	return r.LeaseExpiry.Add(-r.Holder.Grace).Sub(by.LapsedBy) + 100*time.Millisecond, true
}

// leaseUntil is when a new claim's lease ends: with the message's visibility,
// else at the context's deadline, else after Config.Lease; plus
// Config.ClaimGrace.
func (g *Guard) leaseUntil(ctx context.Context, lease *visibility.Lease, now time.Time) time.Time {
	end := now.Add(g.cfg.Lease)
	if lease != nil {
		end = lease.Deadline()
	} else if d, ok := ctx.Deadline(); ok {
		end = d
	}
	return end.Add(g.cfg.ClaimGrace)
}

// storeTTL is how long completed records last in store, for the cache,
// and whether the Guard knows it: for a *DynamoStore only.
func storeTTL(s Store) (time.Duration, bool) {
	if d, ok := s.(*DynamoStore); ok {
		return d.cfg.TTL, true
	}
	return 0, false
}

// fifoReceive returns the Receive a claim for m is made by (see Receive):
// zero but for a FIFO queue's message with a known receive count, held by
// the visibility heartbeat (lease), whose loss cancels its handler.
func (g *Guard) fifoReceive(m *sqsworker.Message, lease *visibility.Lease, now time.Time) Receive {
	if lease == nil || !strings.HasSuffix(m.QueueURL, ".fifo") || m.ID == "" || m.ReceiveCount <= 0 {
		return Receive{}
	}
	return Receive{MessageID: m.ID, Count: m.ReceiveCount, Grace: g.takeOverGrace(lease), LapsedBy: now.Add(-clockSkew)}
}

// takeOverGrace is how much of ClaimGrace a claim its message's next
// receive may take over keeps (see Receive): the grace less the heartbeat's
// LossLag, so that such a claim's lease, as far as its takeover goes, ends
// LossLag past its visibility deadline. Its keeper gives it up then, and
// the next receive takes it over a clockSkew later.
func (g *Guard) takeOverGrace(lease *visibility.Lease) time.Duration {
	return g.cfg.ClaimGrace - lease.LossLag()
}

// clockSkew is the room left for the clocks of two hosts, and for a
// receive's round trip, when a claim is taken over (see Receive).
const clockSkew = time.Second

// sameStore reports whether a and b keep their records in the same place:
// the same Store, or two DynamoStores of one table and key prefix.
func sameStore(a, b Store) (same bool) {
	da, aok := a.(*DynamoStore)
	db, bok := b.(*DynamoStore)
	if aok && bok {
		// A table named by its ARN in one and by its name in the other
		// has an account in one only.
		sameAccount := da.account == db.account || da.account == "" || db.account == ""
		return da.tableName == db.tableName && da.region == db.region && sameAccount && da.cfg.KeyPrefix == db.cfg.KeyPrefix
	}
	defer func() {
		if recover() != nil { // a Store of a type == cannot compare
			same = false
		}
	}()
	return a == b
}
