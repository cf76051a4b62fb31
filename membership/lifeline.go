package membership

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// A lifeline is a TCP connection a member holds to a member that accepts
// them (Config.Lifelines: the scheduler). Nothing is sent on it after the
// dialer's name; its only use is that it breaks. A process killed by
// SIGKILL, or that crashes, has its sockets closed by the kernel at once,
// so the accepting member learns of the death in microseconds rather than
// after memberlist's probe and suspicion (most of a second). A broken
// lifeline alone never makes a failure: it is a hint, on which the member
// probes the other directly (Suspect); one that answers is alive (a
// restarted process, a dropped connection), and so is one that announced
// its leave.
//
// The accepting member offers its lifeline address in memberlist's
// push/pull state (Delegate.LocalState), which every joiner receives from
// its seed; so a member holds a lifeline to each seed that accepts them.

// suspectPings is the least number of direct probes, each waiting
// ProbeTimeout, a suspected member gets before it is reported failed:
// enough that a lost UDP packet does not make a death. The probes go on
// for lifelineConfirm probe intervals if that is longer (at most
// maxConfirm). A live member's connection rarely breaks, and then it
// answers; a process that is gone answers none.
const suspectPings = 3

// lifelineConfirm is how many probe intervals Suspect probes for.
const lifelineConfirm = 2

// maxConfirm bounds Suspect's probing where the probe interval is long
// (seconds): a closed connection and no answer for this long is a death.
const maxConfirm = 2 * time.Second

// lifelineState is this member's push/pull state.
type lifelineState struct {
	Lifeline string `json:"lifeline,omitempty"`
}

// lifelines is a member's side of its lifelines.
type lifelines struct {
	ln    net.Listener // nil unless Config.Lifelines
	offer string       // host:port offered to joiners; set once Start knows its host

	mu     sync.Mutex
	conns  map[net.Conn]string // open lifelines, both ways: the peer's name once known
	dialed map[string]bool     // addresses this member holds a lifeline to
	closed bool
}

// track registers c, or closes it and reports false once the member shut
// down.
func (l *lifelines) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return false
	}
	l.conns[c] = ""
	return true
}

// named records the name of the member at the other end of c.
func (l *lifelines) named(c net.Conn, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[c]; ok {
		l.conns[c] = name
	}
}

// untrack forgets c and reports whether the member still runs (a broken
// lifeline then means something).
func (l *lifelines) untrack(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
	c.Close()
	return !l.closed
}

func (l *lifelines) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// close ends every lifeline: the member shuts down.
func (l *lifelines) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.ln != nil {
		l.ln.Close()
	}
	for c := range l.conns {
		c.Close()
	}
}

// listenLifelines opens the lifeline listener on the gossip IP, any port.
func (m *Member) listenLifelines(bind string) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(bind, "0"))
	if err != nil {
		return fmt.Errorf("membership: %s cannot listen for lifelines on %s: %w", m.name, bind, err)
	}
	m.lines.ln = ln
	return nil
}

// acceptLifelines runs until the listener closes; each lifeline is read by
// its own goroutine until it breaks.
func (m *Member) acceptLifelines() {
	for {
		c, err := m.lines.ln.Accept()
		if err != nil {
			return
		}
		if !m.lines.track(c) {
			return
		}
		m.goBackground(func() { m.holdAccepted(c) })
	}
}

func (m *Member) holdAccepted(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(m.tcpTimeout))
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	name = strings.TrimSuffix(name, "\n")
	if err != nil || name == "" {
		m.lines.untrack(c)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	m.lines.named(c, name)
	_, err = r.ReadByte() // nothing comes: it returns when the line breaks
	if m.lines.untrack(c) {
		m.log.Debug("lifeline broke", "peer", name, "err", err)
		m.Suspect(name)
	}
}

// localState offers the lifeline address, once known.
func (l *lifelines) localState() []byte {
	l.mu.Lock()
	offer := l.offer
	l.mu.Unlock()
	if offer == "" {
		return nil
	}
	b, _ := json.Marshal(lifelineState{Lifeline: offer})
	return b
}

// mergeState dials the lifeline a member offers, unless this member holds
// one to it already. It runs inside memberlist's push/pull: the dial does
// not.
func (m *Member) mergeState(buf []byte) {
	var st lifelineState
	if len(buf) == 0 || json.Unmarshal(buf, &st) != nil || st.Lifeline == "" {
		return
	}
	l := &m.lines
	l.mu.Lock()
	if l.closed || l.dialed[st.Lifeline] || st.Lifeline == l.offer {
		l.mu.Unlock()
		return
	}
	l.dialed[st.Lifeline] = true
	l.mu.Unlock()
	m.goBackground(func() { m.holdDialed(st.Lifeline) })
}

func (m *Member) holdDialed(addr string) {
	defer func() {
		m.lines.mu.Lock()
		delete(m.lines.dialed, addr) // the next push/pull dials again
		m.lines.mu.Unlock()
	}()
	c, err := net.DialTimeout("tcp", addr, m.tcpTimeout)
	if err != nil {
		m.log.Debug("lifeline not opened", "addr", addr, "err", err)
		return
	}
	if !m.lines.track(c) {
		return
	}
	m.lines.named(c, addr)
	if _, err = c.Write([]byte(m.name + "\n")); err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	if m.lines.untrack(c) && !errors.Is(err, net.ErrClosed) {
		m.log.Debug("lifeline closed", "addr", addr, "err", err)
	}
}

// Suspect is a hint that member name may have died (its connection
// closed): this member probes it directly, one probe after the other, each
// waiting the probe timeout, for 2 probe intervals (at least 3 probes, at
// most 2 s), and reports it failed (Fail) if it answered none, is still a
// member and has not announced a leave. A member that
// answers is left alone. It returns at once; memberlist's own detection
// goes on regardless, and a failure is reported once whichever finds it
// first.
func (m *Member) Suspect(name string) {
	if name == m.name {
		return
	}
	m.goBackground(func() {
		m.tableMu.Lock()
		info, ok := m.table[name]
		m.tableMu.Unlock()
		addr, err := net.ResolveUDPAddr("udp", info.Addr)
		if !ok || err != nil {
			m.decided(name, false) // gone already
			return
		}
		deadline := time.Now().Add(m.confirm)
		for i := 0; i < suspectPings || time.Now().Before(deadline); i++ {
			if m.lines.isClosed() {
				return
			}
			start := time.Now()
			if _, err := m.ml.Ping(name, addr); err == nil {
				m.log.Debug("suspected member answered a probe", "peer", name)
				m.decided(name, false)
				return
			}
			// A ping that failed at once (no route) still takes its time,
			// so that the probes span suspectPings probe timeouts.
			time.Sleep(m.probeTimeout - time.Since(start))
		}
		m.decided(name, m.declareFailed(name))
	})
}

func (m *Member) decided(name string, failed bool) {
	if m.suspected != nil {
		m.suspected(name, failed)
	}
}

// declareFailed reports name failed, unless memberlist already reported it
// gone or it announced its leave; memberlist's own report of it later is
// then not repeated.
func (m *Member) declareFailed(name string) bool {
	if m.intents.has(name, time.Now()) {
		return false
	}
	m.tableMu.Lock()
	info, ok := m.table[name]
	if ok {
		delete(m.table, name)
		m.reported[name] = true
	}
	m.tableMu.Unlock()
	if !ok {
		return false
	}
	m.log.Warn("member failed: its connection closed and it answered no probe", "peer", name, "for", m.confirm)
	m.queueEvent(Event{Kind: Fail, Name: info.Name, Addr: info.Addr, Meta: info.Meta})
	return true
}
