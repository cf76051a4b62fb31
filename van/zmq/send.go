//go:build cgo

package zmq

import (
	"fmt"

	zmq4 "github.com/pebbe/zmq4"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// Send implements van.Transport: it sends msg to the DEALER connected to
// msg.Meta.Recver as one multipart message [meta, data...] and returns the
// number of bytes in all frames. libzmq copies every frame during the call,
// so the caller may reuse msg.Data as soon as Send returns.
//
// Sends to the same peer are serialised; sends to different peers proceed
// in parallel. Send blocks while the peer's queue is at the high-water mark
// (Config.WaterMark).
func (t *Transport) Send(msg *message.Message) (int, error) {
	id := msg.Meta.Recver
	// Reject here what the receiver would reject, so the bug shows up at
	// its source instead of as a FrameError on another node.
	if err := message.CheckFrames(&msg.Meta, len(msg.Data)); err != nil {
		return 0, fmt.Errorf("van/zmq: send to node %d: %w", id, err)
	}
	for {
		t.mu.RLock()
		p := t.peers[id]
		t.mu.RUnlock()
		if p == nil {
			if t.closed.Load() {
				return 0, van.ErrClosed
			}
			return 0, fmt.Errorf("van/zmq: no connection to node %d; was it connected?", id)
		}
		p.mu.Lock()
		if p.sock == nil {
			// Connect replaced this peer (or a failed send dropped it)
			// after the lookup, so it is no longer in peers: look again.
			p.mu.Unlock()
			continue
		}
		n, err := t.sendLocked(p, id, msg)
		p.mu.Unlock()
		return n, err
	}
}

// sendLocked writes msg's frames to p's DEALER. Caller holds p.mu.
func (t *Transport) sendLocked(p *peer, id int32, msg *message.Message) (int, error) {
	p.meta = msg.Meta.MarshalTo(p.meta[:0])
	defer func() {
		if cap(p.meta) > maxKeptMetaBuf {
			p.meta = nil
		}
	}()

	flags := zmq4.SNDMORE
	if len(msg.Data) == 0 {
		flags = 0
	}
	n, err := p.sock.SendBytes(p.meta, flags)
	if err != nil {
		// Nothing was queued: the socket is still usable.
		return 0, t.sendErr(id, p, err)
	}
	total := n
	for i, d := range msg.Data {
		if i == len(msg.Data)-1 {
			flags = 0
		}
		n, err := p.sock.SendBytes(d, flags)
		if err != nil {
			// Part of a multipart message is queued and the next send
			// would be appended to it: the socket cannot be reused.
			t.dropPeer(id, p)
			return total, t.sendErr(id, p, err)
		}
		total += n
	}
	return total, nil
}

func (t *Transport) sendErr(id int32, p *peer, err error) error {
	if zmq4.AsErrno(err) == zmq4.ETERM || t.closed.Load() {
		return van.ErrClosed
	}
	return fmt.Errorf("van/zmq: send to node %d at %s: %w", id, p.addr, err)
}

// dropPeer forgets p (unless Connect already replaced it) and closes it, in
// that order so that peers never holds a closed socket. Caller holds p.mu.
func (t *Transport) dropPeer(id int32, p *peer) {
	t.mu.Lock()
	if t.peers[id] == p {
		delete(t.peers, id)
	}
	t.mu.Unlock()
	p.close(0)
}
