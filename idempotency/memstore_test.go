package idempotency

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// MemStore is an in-memory Store for the package's tests, with DynamoStore's
// conditions (expiry in whole seconds, leases in milliseconds, the claimer's
// own token recognised) and faults on demand.
type MemStore struct {
	*memData
	fault  func(op string) error // guarded by mu
	calls  map[string]int        // guarded by mu
	failed map[string]int        // guarded by mu
}

// memData is the records MemStore views share.
type memData struct {
	mu      sync.Mutex
	ttl     time.Duration
	recs    map[string]Record
	applied map[string][]types.TransactWriteItem // committed writes, by key ("" without a claim)
	commits map[string]bool                      // IDs of the commits applied
}

// Operation names MemStore.SetFault is called with.
const (
	OpClaim       = "Claim"
	OpComplete    = "Complete"
	OpRelease     = "Release"
	OpExtendLease = "ExtendLease"
	OpCommit      = "CommitWrites"
)

// ErrLostReply, returned by a fault, makes the call take effect and then
// fail, as a request whose reply was lost.
var ErrLostReply = errors.New("injected: reply lost")

var (
	_ Store          = (*MemStore)(nil)
	_ WriteCommitter = (*MemStore)(nil)
)

// NewMemStore returns an empty MemStore whose records last ttl (DefaultTTL
// if 0).
func NewMemStore(ttl time.Duration) *MemStore {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	return &MemStore{memData: &memData{ttl: ttl, recs: map[string]Record{}, applied: map[string][]types.TransactWriteItem{}, commits: map[string]bool{}},
		calls: map[string]int{}, failed: map[string]int{}}
}

// Unfaulted returns a view of the same records without s's faults, as
// another worker reaching the store would see them.
func (s *MemStore) Unfaulted() *MemStore {
	return &MemStore{memData: s.memData, calls: map[string]int{}, failed: map[string]int{}}
}

// SetFault makes every call of the store ask f first; a non-nil error fails
// the call without effect. nil removes the fault.
func (s *MemStore) SetFault(f func(op string) error) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

// Calls returns how many times op was called, failed calls included.
func (s *MemStore) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Failures returns how many calls of op the fault failed.
func (s *MemStore) Failures(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed[op]
}

// Get returns the record of key.
func (s *MemStore) Get(key string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[key]
	return *copyRecord(&r), ok
}

// Put replaces the record of r.Key, as another holder's write would.
func (s *MemStore) Put(r Record) {
	s.mu.Lock()
	s.recs[r.Key] = *copyRecord(&r)
	s.mu.Unlock()
}

// begin counts op and applies the fault. s.mu is held.
func (s *MemStore) begin(ctx context.Context, op string) error {
	s.calls[op]++
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.fault != nil {
		if err := s.fault(op); err != nil {
			s.failed[op]++
			return fmt.Errorf("memstore: %s: %w", op, err)
		}
	}
	return nil
}

// Claim implements Store.
func (s *MemStore) Claim(ctx context.Context, key, payloadHash string, leaseUntil time.Time, by Receive) (string, *Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, OpClaim); err != nil {
		return "", nil, err
	}
	now := time.Now()
	if r, ok := s.recs[key]; ok && r.Expiry.Unix() >= now.Unix() &&
		(r.Status != StatusInProgress || r.LeaseExpiry.UnixMilli() >= now.UnixMilli()) &&
		!by.takeable(&r) {
		return "", copyRecord(&r), nil
	}
	token := newToken()
	s.recs[key] = Record{Key: key, Status: StatusInProgress, Expiry: time.Unix(max(now.Add(s.ttl).Unix(), ceilUnix(leaseUntil)), 0),
		LeaseExpiry: time.UnixMilli(leaseUntil.UnixMilli()), Token: token, PayloadHash: payloadHash, Holder: Receive{MessageID: by.MessageID, Count: by.Count, Grace: by.Grace.Truncate(time.Millisecond)}}
	return token, nil, nil
}

// Complete implements Store.
func (s *MemStore) Complete(ctx context.Context, key, token string, result []byte) error {
	_, err := s.completeRecord(ctx, key, token, "", result)
	return err
}

func (s *MemStore) completeRecord(ctx context.Context, key, token, _ string, result []byte) (*Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, OpComplete); err != nil {
		return nil, err
	}
	r, ok := s.recs[key]
	if !ok || r.Token != token {
		return nil, fmt.Errorf("memstore: completing key %q: %w", key, ErrNotHolder)
	}
	r.Status = StatusCompleted
	r.Expiry = time.Unix(time.Now().Add(s.ttl).Unix(), 0)
	r.LeaseExpiry, r.Holder = time.Time{}, Receive{}
	if result != nil {
		r.Result = append([]byte(nil), result...)
	}
	s.recs[key] = r
	return copyRecord(&r), nil
}

// Release implements Store.
func (s *MemStore) Release(ctx context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, OpRelease); err != nil {
		return err
	}
	if r, ok := s.recs[key]; !ok || r.Token != token || r.Status != StatusInProgress {
		return fmt.Errorf("memstore: releasing key %q: %w", key, ErrNotHolder)
	}
	delete(s.recs, key)
	return nil
}

// ExtendLease implements Store.
func (s *MemStore) ExtendLease(ctx context.Context, key, token string, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, OpExtendLease); err != nil {
		return err
	}
	r, ok := s.recs[key]
	if !ok || r.Token != token || r.Status != StatusInProgress {
		return fmt.Errorf("memstore: extending the lease of key %q: %w", key, ErrNotHolder)
	}
	if r.LeaseExpiry.UnixMilli() > until.UnixMilli() {
		return nil // held longer already: a lease never moves back
	}
	r.LeaseExpiry = time.UnixMilli(until.UnixMilli())
	r.Expiry = time.Unix(max(time.Now().Add(s.ttl).Unix(), ceilUnix(until)), 0)
	s.recs[key] = r
	return nil
}

// Applied returns the writes committed with the claims of key ("" for those
// committed without a claim), in order.
func (s *MemStore) Applied(key string) []types.TransactWriteItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.applied[key])
}

// CommitWrites implements WriteCommitter, as DynamoStore does: a commit
// whose ID was applied succeeds again without effect, as does one finding
// the record completed with its token.
func (s *MemStore) CommitWrites(ctx context.Context, c Commit) (*Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[OpCommit]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var lost error
	if s.fault != nil {
		if err := s.fault(OpCommit); err != nil {
			s.failed[OpCommit]++
			if !errors.Is(err, ErrLostReply) {
				return nil, fmt.Errorf("memstore: %s: %w", OpCommit, err)
			}
			lost = fmt.Errorf("memstore: %s: %w", OpCommit, err)
		}
	}
	rec, err := s.commit(c)
	if lost != nil {
		return nil, lost
	}
	return rec, err
}

// commit applies c. s.mu is held.
func (s *MemStore) commit(c Commit) (*Record, error) {
	if c.ID != "" && s.commits[c.ID] {
		if c.Key == "" {
			return nil, nil
		}
		r := s.recs[c.Key]
		return copyRecord(&r), nil
	}
	var rec *Record
	if c.Key != "" {
		r, ok := s.recs[c.Key]
		switch {
		case ok && r.Token == c.Token && r.Status == StatusCompleted:
			return copyRecord(&r), nil
		case !ok || r.Token != c.Token || r.Status != StatusInProgress:
			return nil, fmt.Errorf("memstore: committing the writes of key %q: %w", c.Key, ErrNotHolder)
		}
		r.Status = StatusCompleted
		r.Expiry = time.Unix(c.At.Add(s.ttl).Unix(), 0)
		r.LeaseExpiry, r.Holder = time.Time{}, Receive{}
		if c.Result != nil {
			r.Result = append([]byte(nil), c.Result...)
		}
		s.recs[c.Key] = r
		rec = copyRecord(&r)
	}
	s.applied[c.Key] = append(s.applied[c.Key], c.Writes...)
	if c.ID != "" {
		s.commits[c.ID] = true
	}
	return rec, nil
}
