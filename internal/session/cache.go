package session

import (
	"hash/maphash"
	"sync"
)

// routeCache remembers, per key, the routed session, the generation and whether the route is
// "plain" (not suspended, routed row live). It is written only by a goroutine holding the key's
// boundary lock (after a commit, or after reading the store under the lock) and dropped on any
// error, so inside the boundary it is exactly the store's state. Readers outside the lock (the
// pre-flight classification) may see a value one transition old; that is why only a verdict
// computed inside the boundary is authoritative.
type routeCache struct {
	seed     maphash.Seed
	perShard int
	shards   [cacheShards]cacheShard
}

const cacheShards = 64

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]cacheEntry
}

type cacheEntry struct {
	sid  string
	gen  int64
	live bool // route not suspended and its session row not ended
}

// newRouteCache returns a cache holding about size keys, or nil (disabled) if size < 0.
func newRouteCache(size int) *routeCache {
	if size < 0 {
		return nil
	}
	if size == 0 {
		size = 1 << 18
	}
	c := &routeCache{seed: maphash.MakeSeed(), perShard: max(1, size/cacheShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]cacheEntry)
	}
	return c
}

func (c *routeCache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)%cacheShards]
}

func (c *routeCache) get(key string) (cacheEntry, bool) {
	if c == nil {
		return cacheEntry{}, false
	}
	s := c.shard(key)
	s.mu.RLock()
	e, ok := s.m[key]
	s.mu.RUnlock()
	return e, ok
}

// set must be called only while holding key's boundary lock.
func (c *routeCache) set(key string, e cacheEntry) {
	if c == nil {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	if _, ok := s.m[key]; !ok && len(s.m) >= c.perShard {
		for k := range s.m { // evict an arbitrary entry: the cache only saves reads
			delete(s.m, k)
			break
		}
	}
	s.m[key] = e
	s.mu.Unlock()
}

// drop forgets key; called under the key's lock whenever the store's state is uncertain.
func (c *routeCache) drop(key string) {
	if c == nil {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// len returns the number of keys cached (tests and benchmarks).
func (c *routeCache) len() int {
	if c == nil {
		return 0
	}
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
