// Package ratelog logs events that a stranger can trigger at will (bad
// frames, refused connections, limits hit) at a bounded rate: the first
// event of each (peer, reason) in an interval is logged, the rest are only
// counted, and the next line logged for that pair carries the count of
// those it suppressed. A flood of bad frames costs a few lines per
// interval, never one per frame; the node's counters stay exact.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is the interval New uses for 0.
const DefaultInterval = 10 * time.Second

// maxKeys bounds the pairs tracked at once, so that a peer inventing a new
// identity per frame cannot grow the table: past it, events of untracked
// pairs share the pair (OtherPeers, reason).
const maxKeys = 1024

// OtherPeers is the peer name of events whose own pair did not fit the
// table.
const OtherPeers = "(other peers)"

type key struct{ peer, reason string }

type entry struct {
	last       time.Time // when a line was last logged for the pair
	suppressed int64     // events since then that were not logged
}

// Limiter decides which events are logged. It is safe for concurrent use;
// the zero value is not usable, use New.
type Limiter struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu sync.Mutex
	m  map[key]*entry
}

// New returns a Limiter that logs to log (slog.Default if nil) at most one
// line per (peer, reason) per interval (DefaultInterval if 0).
func New(log *slog.Logger, interval time.Duration) *Limiter {
	if log == nil {
		log = slog.Default()
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Limiter{log: log, interval: interval, now: time.Now, m: map[key]*entry{}}
}

// Log logs msg at level with "peer", "reason" and, if events of the pair
// were suppressed since its last line, "suppressed" (their count) and
// "interval", followed by args, unless a line for (peer, reason) was
// logged less than an interval ago, in which case the event is only
// counted. It reports whether it logged.
func (l *Limiter) Log(level slog.Level, peer, reason, msg string, args ...any) bool {
	if !l.log.Enabled(context.Background(), level) {
		return false
	}
	now := l.now()
	l.mu.Lock()
	e := l.entry(key{peer, reason}, now)
	if !e.last.IsZero() && now.Sub(e.last) < l.interval {
		e.suppressed++
		l.mu.Unlock()
		return false
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	l.mu.Unlock()
	// the pair and its count first: the fields a reader scans for
	head := []any{"peer", peer, "reason", reason}
	if n > 0 {
		head = append(head, "suppressed", n, "interval", l.interval)
	}
	l.log.Log(context.Background(), level, msg, append(head, args...)...)
	return true
}

// entry returns the pair's entry, making room when the table is full by
// forgetting the pairs quiet for an interval (their suppressed counts were
// already reported or are in the node's counters), and sharing one entry
// per reason among the peers that still do not fit. Caller holds l.mu.
func (l *Limiter) entry(k key, now time.Time) *entry {
	if e, ok := l.m[k]; ok {
		return e
	}
	if full := maxKeys - 1; len(l.m) >= full { // one place left for OtherPeers
		for q, e := range l.m {
			if now.Sub(e.last) >= l.interval {
				delete(l.m, q)
			}
		}
		if len(l.m) >= full {
			k.peer = OtherPeers
			if e, ok := l.m[k]; ok {
				return e
			}
		}
	}
	e := &entry{}
	l.m[k] = e
	return e
}
