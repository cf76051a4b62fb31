package membership

import (
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// intentGrace is added to how long a receiver keeps a leave intent beyond
// the leaver's own waiting: the intent must outlive the leaver's memberlist
// leave broadcast, and only a leaver that gives up and then crashes inside
// this window would be reported as leaving rather than failing.
const intentGrace = 10 * time.Second

// Message types carried as memberlist user messages.
const (
	msgLeaveIntent = "leave-intent"
	msgLeaveAck    = "leave-ack"
)

// wireMsg is a user message between members. JSON: a leave is rare and the
// messages are tiny, and unknown fields from a newer version are ignored.
type wireMsg struct {
	Type string `json:"t"`
	// Name is the leaving member.
	Name string `json:"n"`
	// Addr is the leaver's gossip address, where the ack goes.
	Addr string `json:"a,omitempty"`
	// KeepMs is how long the receiver keeps the intent, in milliseconds.
	KeepMs int64 `json:"k,omitempty"`
	// From is the acknowledging member.
	From string `json:"f,omitempty"`
}

// leaveIntents are the announced leaves of other members, each kept until
// a deadline on this member's clock.
type leaveIntents struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (l *leaveIntents) add(name string, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until[name] = until
}

// has reports whether name announced a leave that is still valid at now.
func (l *leaveIntents) has(name string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.until[name]
	return ok && !now.After(until)
}

// take reports whether name announced a leave that is still valid at now,
// and forgets it (a member leaves once; a rejoin starts afresh). Expired
// intents are dropped on the way, so the map stays as small as the number
// of leaves in flight.
func (l *leaveIntents) take(name string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.until[name]
	delete(l.until, name)
	for n, u := range l.until {
		if now.After(u) {
			delete(l.until, n)
		}
	}
	return ok && !now.After(until)
}

// ackWait tracks the acks this member is waiting for while it leaves.
type ackWait struct {
	mu   sync.Mutex
	want map[string]bool // members that have not acked yet; nil when not leaving
	done chan struct{}   // closed when want becomes empty
}

// announceLeave sends a leave intent to every other live member, waits up
// to wait for all of them to acknowledge, and returns those that did.
// Receivers keep the intent for keep. The caller holds stateMu, so
// memberlist is not shut down meanwhile.
func (m *Member) announceLeave(wait, keep time.Duration) []memberlist.Node {
	var peers []memberlist.Node
	for _, i := range m.Members() {
		if i.Name == m.name {
			continue
		}
		if n, ok := nodeAt(i.Name, i.Addr); ok {
			peers = append(peers, n)
		}
	}
	if len(peers) == 0 {
		return nil
	}
	msg, err := json.Marshal(wireMsg{Type: msgLeaveIntent, Name: m.name, Addr: m.addr, KeepMs: keep.Milliseconds()})
	if err != nil {
		m.log.Warn("cannot encode leave intent; others may report a failure", "err", err)
		return nil
	}
	m.acks.mu.Lock()
	m.acks.want = map[string]bool{}
	for _, p := range peers {
		m.acks.want[p.Name] = true
	}
	done := make(chan struct{})
	m.acks.done = done
	m.acks.mu.Unlock()

	// Send to all peers at once: one unreachable peer costs its stream
	// timeout, and must not delay the announcement to the others.
	for i := range peers {
		p := &peers[i]
		m.goBackground(func() {
			if err := m.ml.SendReliable(p, msg); err != nil {
				m.log.Debug("leave intent not delivered", "peer", p.Name, "err", err)
			}
		})
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}

	m.acks.mu.Lock()
	var acked []memberlist.Node
	var missing []string
	for _, p := range peers {
		if m.acks.want[p.Name] {
			missing = append(missing, p.Name)
		} else {
			acked = append(acked, p)
		}
	}
	m.acks.want, m.acks.done = nil, nil // late acks are ignored
	m.acks.mu.Unlock()
	if len(missing) > 0 {
		m.log.Warn("leaving without acknowledgement from some members; they may report a failure", "members", missing, "waited", wait)
	}
	return acked
}

// pushLeft sends this member's state, in which it has left, to each peer
// with memberlist's push/pull state sync (Join does one per address), in
// parallel, and waits up to wait. It returns how many syncs succeeded in
// time. The sync cannot revive this member: memberlist ignores alive
// messages about itself once it has left.
func (m *Member) pushLeft(peers []memberlist.Node, wait time.Duration) int {
	if len(peers) == 0 {
		return 0
	}
	results := make(chan bool, len(peers)) // buffered: late senders never block
	for _, p := range peers {
		addr := p.Address()
		m.goBackground(func() {
			_, err := m.ml.Join([]string{addr})
			if err != nil {
				m.log.Debug("could not push the leave", "peer", p.Name, "err", err)
			}
			results <- err == nil
		})
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	ok := 0
	for range peers {
		select {
		case r := <-results:
			if r {
				ok++
			}
		case <-timer.C:
			return ok
		}
	}
	return ok
}

// handleMsg handles a user message. It runs on memberlist's receive path,
// so it never blocks: the ack goes out from its own goroutine.
func (m *Member) handleMsg(b []byte) {
	var msg wireMsg
	if err := json.Unmarshal(b, &msg); err != nil {
		m.log.Debug("ignoring unreadable user message", "len", len(b), "err", err)
		return
	}
	switch msg.Type {
	case msgLeaveIntent:
		if msg.Name == "" || msg.KeepMs <= 0 {
			return
		}
		// Record first, ack second: once the leaver has our ack, its
		// memberlist leave can only reach us after the intent.
		m.intents.add(msg.Name, time.Now().Add(time.Duration(msg.KeepMs)*time.Millisecond))
		m.sendAck(msg)
	case msgLeaveAck:
		if msg.Name != m.name {
			return
		}
		m.acks.mu.Lock()
		if m.acks.want[msg.From] {
			delete(m.acks.want, msg.From)
			if len(m.acks.want) == 0 {
				close(m.acks.done)
			}
		}
		m.acks.mu.Unlock()
	}
}

func (m *Member) sendAck(intent wireMsg) {
	to, ok := nodeAt(intent.Name, intent.Addr)
	if !ok {
		m.log.Debug("leave intent with a bad address; not acknowledged", "from", intent.Name, "addr", intent.Addr)
		return
	}
	ack, err := json.Marshal(wireMsg{Type: msgLeaveAck, Name: intent.Name, From: m.name})
	if err != nil {
		return
	}
	m.goBackground(func() {
		if err := m.ml.SendReliable(&to, ack); err != nil {
			m.log.Debug("leave ack not delivered", "to", intent.Name, "err", err)
		}
	})
}

// nodeAt is the memberlist node to send a user message to name at addr.
func nodeAt(name, addr string) (memberlist.Node, bool) {
	host, portStr, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	port, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || ip == nil || perr != nil {
		return memberlist.Node{}, false
	}
	return memberlist.Node{Name: name, Addr: ip, Port: uint16(port)}, true
}

// goBackground runs f in a goroutine that Shutdown waits for, unless
// Shutdown has begun (then f does not run: the member is gone).
func (m *Member) goBackground(f func()) {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.bgClosed {
		return
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		f()
	}()
}
