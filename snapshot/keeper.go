package snapshot

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Keep is how many complete snapshots of a rank a Keeper leaves in its
// directory; older ones are removed.
const Keep = 2

// Store is what a Keeper saves: a non-destructive copy of the store's keys
// in [begin, end), taken at one point in time, and its inverse.
// kv.DefaultHandler and paramstore.Store implement it.
type Store interface {
	Snapshot(begin, end uint64) ([]byte, error)
	Restore(state []byte) error
	Len() int // the number of keys, for the log
}

// Keeper resumes a server's store from its latest snapshot and then takes
// a snapshot every Interval. Fill in the fields, then call Resume once
// before the server serves, and Run.
type Keeper struct {
	Dir        string
	Rank       int
	Begin, End uint64 // the server's key range
	Interval   time.Duration
	// Skip, if set, is asked before every snapshot; a non-empty reason
	// skips it (logged once per change of reason).
	Skip func() string
	Log  *slog.Logger

	next     uint64   // the sequence of the next snapshot
	complete []uint64 // sequences known complete, oldest first
	skipped  string
}

func (k *Keeper) log() *slog.Logger {
	if k.Log == nil {
		return slog.Default()
	}
	return k.Log
}

// Resume restores s from the rank's latest complete snapshot of the same
// key range and returns it, or nil (logged) when there is none; unusable
// files are logged and skipped.
func (k *Keeper) Resume(s Store) (*Snapshot, error) {
	check := func(h Header) error {
		if h.Begin != k.Begin || h.End != k.End {
			return fmt.Errorf("it holds key range [%d, %d), this server's is [%d, %d): the job's number of servers changed", h.Begin, h.End, k.Begin, k.End)
		}
		return nil
	}
	snap, maxSeq, err := Latest(k.Dir, k.Rank, check, k.log())
	if err != nil {
		return nil, err
	}
	k.next = maxSeq + 1
	if snap == nil {
		k.log().Info("snapshot: no usable snapshot for this server; it starts empty", "dir", k.Dir, "rank", k.Rank)
		return nil, nil
	}
	if err := s.Restore(snap.State); err != nil {
		return nil, fmt.Errorf("snapshot: restoring %s: %w", snap.Path, err)
	}
	k.complete = append(k.complete, snap.Seq)
	k.log().Info("snapshot: restored the store from a snapshot", "file", snap.Path, "seq", snap.Seq,
		"taken", snap.Time.UTC().Format(time.RFC3339), "keys", s.Len(), "range", fmt.Sprintf("[%d, %d)", snap.Begin, snap.End))
	return snap, nil
}

// Take writes one snapshot of s now and prunes the older ones; it returns
// the file's path, or "" when Skip skipped it.
func (k *Keeper) Take(s Store) (string, error) {
	if k.Skip != nil {
		reason := k.Skip()
		if reason != k.skipped {
			k.skipped = reason
			if reason != "" {
				k.log().Warn("snapshot: skipping snapshots", "reason", reason)
			}
		}
		if reason != "" {
			return "", nil
		}
	}
	state, err := s.Snapshot(k.Begin, k.End)
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	h := Header{Rank: k.Rank, Begin: k.Begin, End: k.End, Seq: max(k.next, 1), Time: time.Now()}
	path, err := Write(k.Dir, h, state)
	if err != nil {
		return "", err
	}
	k.next = h.Seq + 1
	k.complete = append(k.complete, h.Seq)
	if len(k.complete) >= Keep {
		// older files, complete or not, are no longer needed
		k.complete = k.complete[len(k.complete)-Keep:]
		if err := Prune(k.Dir, k.Rank, k.complete[0]); err != nil {
			return path, err
		}
	}
	return path, nil
}

// Run takes a snapshot every Interval until ctx is done; failures are
// logged and it tries again at the next tick.
func (k *Keeper) Run(ctx context.Context, s Store) {
	t := time.NewTicker(k.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		path, err := k.Take(s)
		if err != nil {
			k.log().Error("snapshot: cannot write a snapshot", "err", err)
		} else if path != "" {
			k.log().Debug("snapshot: written", "file", path)
		}
	}
}
