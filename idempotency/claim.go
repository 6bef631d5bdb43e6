package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/smithy-go"
)

// Bounds of the store requests made for a claim.
const (
	// attemptTimeout bounds one request.
	attemptTimeout = 5 * time.Second
	// finishBudget bounds the attempts to complete or release a claim, which
	// never go on past the claim's lease either.
	finishBudget = 30 * time.Second
	// retryBase and retryCap shape the backoff between attempts.
	retryBase = 100 * time.Millisecond
	retryCap  = 2 * time.Second
)

// keeper keeps a claim's lease in step with its message's visibility while
// the handler runs, without ever blocking it: the visibility heartbeat asks
// for a lease end with extendTo, and the keeper's goroutine writes it with
// ExtendLease, retried with backoff while the lease it holds lasts. When the
// claim is lost, because ExtendLease says another holder has it or because
// its lease ends without a successful extension, the keeper cancels the
// handler's context with a cause matching ErrNotHolder.
//
// The handler's call owns the keeper: startKeeper starts its goroutine, and
// stop, which the call makes before it returns, ends it and waits for it.
type keeper struct {
	g          *Guard
	key, token string
	log        *slog.Logger
	lose       context.CancelCauseFunc // cancels the handler's context

	mu      sync.Mutex
	want    time.Time // the latest lease end asked for
	stopped bool

	wake   chan struct{} // capacity 1: want changed
	cancel context.CancelFunc
	done   chan struct{}
	held   time.Time // the lease end the store has; the goroutine's until done
	// early is how long before held the claim is given up without a
	// successful extension: for a claim its message's next receive may
	// take over (see Receive), the grace less the heartbeat's LossLag;
	// else 0.
	early time.Duration
}

// lapseAt is when the claim is given up without a successful extension.
func (k *keeper) lapseAt() time.Time { return k.held.Add(-k.early) }

// startKeeper starts keeping the claim of key by token, whose lease ends at
// held (given up early before it: see keeper.early), until stop. ctx is the handler's, whose values the requests keep but
// not its cancellation; lose cancels the handler's context.
func (g *Guard) startKeeper(ctx context.Context, key, token string, held time.Time, early time.Duration, lose context.CancelCauseFunc, log *slog.Logger) *keeper {
	k := &keeper{g: g, key: key, token: token, log: log, lose: lose, held: held, want: held, early: max(early, 0),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	ctx, k.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go k.run(ctx)
	return k
}

// extendTo asks for the claim to hold until the message's visibility ends at
// until, plus the grace. It never blocks: the visibility heartbeat calls it.
func (k *keeper) extendTo(until time.Time) {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	w := until.Add(k.g.cfg.ClaimGrace)
	later := w.After(k.want)
	if later {
		k.want = w
	}
	k.mu.Unlock()
	if !later {
		return
	}
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// stop ends the keeper and returns when the claim's lease ends, as far as
// the keeper knows.
func (k *keeper) stop() time.Time {
	k.mu.Lock()
	k.stopped = true
	k.mu.Unlock()
	k.cancel()
	<-k.done
	return k.held
}

func (k *keeper) wanted() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.want
}

func (k *keeper) run(ctx context.Context) {
	defer close(k.done)
	lapse := time.NewTimer(time.Until(k.lapseAt()))
	defer lapse.Stop()
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	var retrying <-chan time.Time
	failures := 0
	var lastErr error // of the last failed extension
	for {
		select {
		case <-ctx.Done():
			return
		case <-lapse.C:
			cause := fmt.Errorf("idempotency: key %q: the claim's lease ended at %s without a successful extension: %w",
				k.key, k.lapseAt().Format(time.RFC3339Nano), ErrNotHolder)
			if lastErr != nil {
				// When the extensions failed for an outage, the cause
				// is marked so (sqsworker.Unavailable) too.
				cause = fmt.Errorf("%w (last attempt: %w)", cause, lastErr)
			}
			k.lost(cause)
			return
		case <-k.wake:
			if retrying != nil {
				continue // the retry due takes the latest lease end
			}
		case <-retrying:
			retrying = nil
		}
		want := k.wanted()
		if !want.After(k.held) {
			continue
		}
		if !time.Now().Before(k.lapseAt()) {
			continue // the lapse timer fires now
		}
		actx, cancel := context.WithDeadline(ctx, earliest(time.Now().Add(attemptTimeout), k.lapseAt()))
		err := k.g.store.ExtendLease(actx, k.key, k.token, want)
		cancel()
		switch {
		case err == nil:
			k.held, failures, lastErr = want, 0, nil
			lapse.Reset(time.Until(k.lapseAt()))
		case ctx.Err() != nil:
			return // stopped
		case errors.Is(err, ErrNotHolder):
			k.g.storeErrors.Add(1)
			k.lost(err)
			return
		default:
			k.g.storeErrors.Add(1)
			failures++
			lastErr = err
			level := slog.LevelDebug
			if failures == 1 {
				level = slog.LevelWarn
			}
			k.log.Log(ctx, level, "extending the idempotency claim failed; retrying while its lease lasts",
				"error", err, "attempt", failures, "lease_ends", k.lapseAt())
			retry.Reset(backoff(failures))
			retrying = retry.C
		}
	}
}

// lost cancels the handler's context: the claim may be another holder's.
func (k *keeper) lost(cause error) {
	k.g.lostClaims.Add(1)
	k.log.Error("idempotency claim lost while its handler runs; cancelling the handler", "error", cause)
	k.lose(cause)
}

// retry calls op until it succeeds, fails for good (ErrNotHolder, or a
// request no retry fixes) or deadline passes; the first attempt is made
// whatever the deadline. Each attempt is bounded by attemptTimeout, and by
// the deadline after the first; each failed one counts in
// Stats.StoreErrors, but one cut short by ctx's end. It returns op's last
// error.
func (g *Guard) retry(ctx context.Context, deadline time.Time, op func(context.Context) error) error {
	if ctx.Err() != nil {
		// No time left before the first attempt (a Lambda invocation
		// about to stop waiting for the record): a request sent now
		// could land after the record's outcome is reported. Not a
		// failure of the store's.
		return fmt.Errorf("%w: %w", errNoTime, context.Cause(ctx))
	}
	for attempt := 1; ; attempt++ {
		end := time.Now().Add(attemptTimeout)
		if attempt > 1 {
			end = earliest(end, deadline)
		}
		actx, cancel := context.WithDeadline(ctx, end)
		err := op(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() == nil {
			// Not counted when the caller's own bound cut the attempt
			// (the time a Lambda invocation leaves the work after a
			// handler): that is no failure of the store's.
			g.storeErrors.Add(1)
		}
		if !retryable(err) {
			return err
		}
		wait := backoff(attempt)
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// errNoTime is the error of a request to finish a claim (complete, commit,
// release) not sent because no time was left for it: the handler returned
// at the end of the time the process had (see stopby.End). Not an outage.
var errNoTime = errors.New("idempotency: no time left to record the job's outcome: its handler returned too close to the Lambda invocation's deadline (it ignored its context's deadline)")

// permanentCodes are the error codes of DynamoDB requests that retrying
// cannot fix: the request itself, the table or the credentials are wrong.
// Throttling, which DynamoDB models as a client fault, is not among them.
var permanentCodes = map[string]bool{
	"ValidationException":                      true,
	"SerializationException":                   true,
	"ResourceNotFoundException":                true,
	"ItemCollectionSizeLimitExceededException": true,
	"ConditionalCheckFailedException":          true,
	"IdempotentParameterMismatchException":     true,
	"AccessDeniedException":                    true,
	"UnrecognizedClientException":              true,
	"MissingAuthenticationTokenException":      true,
	"IncompleteSignatureException":             true,
	"InvalidSignatureException":                true,
}

// retryable reports whether a failed store request may succeed if tried
// again: not when the claim is another's, nor when DynamoDB refused the
// request itself (validation, a missing table, permissions, a condition of
// the handler's writes, a table of the writes keyed otherwise than their
// items); network errors, timeouts, throttling, transaction conflicts and
// server faults may pass, and so may the errors of other stores.
func retryable(err error) bool {
	if errors.Is(err, ErrNotHolder) || errors.Is(err, errRecordRefused) || errors.Is(err, ErrInvalidWrites) ||
		errors.Is(err, errNoOldItem) || errors.Is(err, errNoTime) {
		return false
	}
	var cancelled *TransactionCanceledError
	var table *WritesTableError
	if errors.As(err, &cancelled) || errors.As(err, &table) {
		return false
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		return !permanentCodes[api.ErrorCode()]
	}
	return true
}

// backoff is the delay before retry number n (from 1): exponential from
// retryBase to retryCap, with equal jitter.
func backoff(n int) time.Duration {
	d := retryCap
	if n < 10 {
		d = min(retryBase<<(n-1), retryCap)
	}
	return d/2 + rand.N(d/2+1)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
