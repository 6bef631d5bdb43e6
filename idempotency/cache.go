package idempotency

import (
	"container/list"
	"sync"
	"time"
)

// lru remembers completed keys until their records expire, up to a bound.
type lru struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *lruEntry, most recent first
	byKey map[string]*list.Element
}

type lruEntry struct {
	key     string
	expires time.Time
}

func newLRU(n int) *lru {
	return &lru{max: n, order: list.New(), byKey: make(map[string]*list.Element, n)}
}

// has reports whether key is a completed key that has not expired at now.
func (c *lru) has(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return false
	}
	if !now.Before(el.Value.(*lruEntry).expires) {
		c.order.Remove(el)
		delete(c.byKey, key)
		return false
	}
	c.order.MoveToFront(el)
	return true
}

func (c *lru) add(key string, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		el.Value.(*lruEntry).expires = expires
		c.order.MoveToFront(el)
		return
	}
	c.byKey[key] = c.order.PushFront(&lruEntry{key: key, expires: expires})
	if c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*lruEntry).key)
	}
}
