package httpguard

import (
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Throttle slows down guessing on the admin listener: wrong admin tokens (the API's bearer token,
// the console's login) and wrong pairing codes. Each client (its IP address) may fail Burst times
// at once; after that one more failure is allowed every Every. A client out of attempts is
// refused with 429 and Retry-After before its credential is even compared, so a correct guess
// made while refused tells it nothing. Successes do not reset a client's count: on loopback the
// operator and anything else on the machine share one address.
//
// The zero Throttle is not usable; a nil *Throttle throttles nothing.
type Throttle struct {
	burst   float64
	every   time.Duration
	log     *slog.Logger
	now     func() time.Time
	mu      sync.Mutex
	clients map[string]*bucket
}

type bucket struct {
	left   float64   // failures still allowed
	at     time.Time // when left was computed
	logged time.Time // when the last refusal was logged
}

// Throttle's defaults: five failures at once, then one a minute.
const (
	ThrottleBurst = 5
	ThrottleEvery = time.Minute
	// maxClients bounds the memory a flood of addresses can take: when it is reached, clients
	// whose attempts are back to Burst are forgotten, and if none are, the table is cleared.
	maxClients = 4096
)

// NewThrottle returns a Throttle that allows burst failures per client at once and one more
// every every (0: the defaults), logging refusals to log (nil: slog.Default).
func NewThrottle(burst int, every time.Duration, log *slog.Logger) *Throttle {
	if burst <= 0 {
		burst = ThrottleBurst
	}
	if every <= 0 {
		every = ThrottleEvery
	}
	if log == nil {
		log = slog.Default()
	}
	return &Throttle{burst: float64(burst), every: every, log: log, now: time.Now, clients: map[string]*bucket{}}
}

// client is r's address without its port.
func client(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// refill brings b up to date at now (t.mu held).
func (t *Throttle) refill(b *bucket, now time.Time) {
	b.left = min(t.burst, b.left+float64(now.Sub(b.at))/float64(t.every))
	b.at = now
}

// Allow reports whether r's client may try a credential now. When it may not, Allow has answered
// r with 429 and Retry-After and logged the refusal (once per Every per client), naming what
// was tried.
func (t *Throttle) Allow(w http.ResponseWriter, r *http.Request, what string) bool {
	if t == nil {
		return true
	}
	t.mu.Lock()
	now := t.now()
	b := t.clients[client(r)]
	if b == nil {
		t.mu.Unlock()
		return true
	}
	t.refill(b, now)
	if b.left >= 1 {
		t.mu.Unlock()
		return true
	}
	wait := time.Duration((1 - b.left) * float64(t.every))
	logIt := now.Sub(b.logged) >= t.every
	if logIt {
		b.logged = now
	}
	t.mu.Unlock()
	if logIt {
		t.log.Warn("admin listener: attempt refused, too many failures from this client", "what", what,
			"remote", client(r), "retry_after", wait.Round(time.Second))
	}
	secs := int(wait/time.Second) + 1
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	http.Error(w, "too many failed attempts from this address: try again in "+strconv.Itoa(secs)+" s", http.StatusTooManyRequests)
	return false
}

// Fail records a failed attempt by r's client.
func (t *Throttle) Fail(r *http.Request) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	key := client(r)
	b := t.clients[key]
	if b == nil {
		if len(t.clients) >= maxClients {
			t.forget(now)
		}
		b = &bucket{left: t.burst, at: now}
		t.clients[key] = b
	}
	t.refill(b, now)
	b.left = max(0, b.left-1)
}

// forget drops the clients back to a full count, or every client if none is (t.mu held).
func (t *Throttle) forget(now time.Time) {
	for k, b := range t.clients {
		t.refill(b, now)
		if b.left >= t.burst {
			delete(t.clients, k)
		}
	}
	if len(t.clients) >= maxClients {
		clear(t.clients)
	}
}
