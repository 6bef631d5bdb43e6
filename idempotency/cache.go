package idempotency

import (
	"container/list"
	"sync"
	"time"
)

// maxCachedResult is the largest saved result the cache keeps with a
// record; a completed key with a larger one is not cached, so that its
// duplicates read the record, result included, from the store.
const maxCachedResult = 16 << 10

// lru remembers the records of completed keys until they expire, up to a
// bound: what a duplicate needs (payload hash, saved result, expiry)
// without asking the store.
type lru struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *Record, most recent first
	byKey map[string]*list.Element
}

func newLRU(n int) *lru {
	return &lru{max: n, order: list.New(), byKey: make(map[string]*list.Element, n)}
}

// get returns a copy of the record of key if it is cached and has not expired
// at now.
func (c *lru) get(key string, now time.Time) (*Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	r := el.Value.(*Record)
	if !now.Before(r.Expiry) {
		c.order.Remove(el)
		delete(c.byKey, key)
		return nil, false
	}
	c.order.MoveToFront(el)
	return copyRecord(r), true
}

// add caches a copy of r, replacing what key had, and evicts the least
// recently used record beyond the bound.
func (c *lru) add(r *Record) {
	r = copyRecord(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[r.Key]; ok {
		el.Value = r
		c.order.MoveToFront(el)
		return
	}
	c.byKey[r.Key] = c.order.PushFront(r)
	if c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*Record).Key)
	}
}

// remove forgets key.
func (c *lru) remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.Remove(el)
		delete(c.byKey, key)
	}
}

// copyRecord returns a copy of r that shares no memory with it.
func copyRecord(r *Record) *Record {
	c := *r
	if r.Result != nil {
		c.Result = append([]byte{}, r.Result...)
	}
	return &c
}
