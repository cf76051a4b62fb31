package postoffice

import (
	"fmt"
	"sync"

	"github.com/elasticps/elasticps/message"
)

// A node whose job speaks another meta wire than it does (PS_WIRE differs
// between nodes) would wait for the job forever: the frames it cannot
// decode are dropped. When the transport reports such a frame before the
// node is ready, Start fails with that error instead. A running node only
// logs it and keeps serving, so that one misconfigured newcomer cannot stop
// a job.

// startFailure is an error that ends a pending Start.
type startFailure struct {
	mu  sync.Mutex
	ch  chan struct{}
	err error
}

// done is closed once fail has been called.
func (f *startFailure) done() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	return f.ch
}

// fail records err (the first one wins) and releases every Start.
func (f *startFailure) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return
	}
	f.err = err
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	close(f.ch)
}

func (f *startFailure) error() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// noteFrameError looks at a frame the transport rejected: a frame of the
// other wire, arriving before the node is ready, fails Start.
func (p *Postoffice) noteFrameError(err error) {
	if !message.IsWireMismatch(err) || p.isReady() {
		return
	}
	p.startFail.fail(fmt.Errorf("postoffice: %s cannot form a job with its peers: %w", p.cfg.Role, err))
}
