// Package membership gives the scheduler and the servers fast failure
// detection and a shared member list, with hashicorp/memberlist (SWIM
// gossip over UDP and TCP).
//
// It complements ps-lite's heartbeats rather than replacing them: a
// heartbeat timeout (PS_HEARTBEAT_TIMEOUT) is typically tens of seconds and
// only the scheduler checks it, while memberlist members probe each other
// (every second by default, every FastProbeInterval in elasticps jobs),
// confirm suspicions through third parties, and tell the scheduler within
// seconds (with the Fast timings, under one) that a server has failed
// (Fail) or left on purpose (Leave). The scheduler feeds those events to its recovery and
// rebalance logic.
//
// Each ps node runs one Member. The scheduler starts first with no Seeds on
// a known port; the others join with the scheduler's gossip address as
// their seed, and carry their ps node id and role in Meta (EncodeMeta) so
// that events can be mapped back to ps node ids.
package membership

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Kind is what happened to a member.
type Kind int

// Kinds of Event.
const (
	// Join: a member became alive (also sent for this member itself, first).
	Join Kind = iota + 1
	// Leave: a member left on purpose (Member.Leave).
	Leave
	// Fail: a member stopped answering probes and others confirmed it
	// dead: it crashed, was killed, or is cut off.
	Fail
	// Update: a member changed its Meta (Member.SetMeta).
	Update
)

func (k Kind) String() string {
	switch k {
	case Join:
		return "join"
	case Leave:
		return "leave"
	case Fail:
		return "fail"
	case Update:
		return "update"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Event is one membership change, as seen by the member reporting it.
type Event struct {
	Kind Kind
	// Name is the member's NodeName.
	Name string
	// Addr is its gossip address, host:port.
	Addr string
	// Meta is its Meta at the time of the event (a copy).
	Meta []byte
}

// Info describes a live member.
type Info struct {
	Name string
	Addr string // gossip address, host:port
	Meta []byte // a copy
}

// Member is this process's membership in the cluster. Its methods are safe
// for concurrent use.
type Member struct {
	name string
	addr string
	ml   *memberlist.Memberlist
	log  *slog.Logger
	meta atomic.Pointer[[]byte] // what NodeMeta gossips

	events   func(Event)
	qmu      sync.Mutex
	qcond    *sync.Cond
	queue    []Event // events not yet delivered; guarded by qmu
	qclosed  bool    // no more events are queued; guarded by qmu
	loopDone chan struct{}

	// stateMu orders Leave against Shutdown: memberlist panics on a Leave
	// after Shutdown, and that must become ErrShutdown instead.
	stateMu  sync.Mutex
	shutdown bool // guarded by stateMu
	// closing is set as Shutdown begins; memberlist's own logger reads it
	// (logWriter) to tell a send racing the close of its sockets from a
	// real send error.
	closing atomic.Bool

	// table mirrors memberlist's live members. memberlist's Members returns
	// pointers into nodes it keeps updating under its own lock, so reading
	// them is a data race; its callbacks, though, run under that lock, so
	// copying the node there is safe.
	tableMu sync.Mutex
	table   map[string]Info

	tcpTimeout   time.Duration // memberlist's stream timeout, bounds intent waits
	probeTimeout time.Duration
	confirm      time.Duration // how long Suspect probes
	lines        lifelines
	// reported are the members Suspect reported failed before memberlist
	// did; memberlist's own report of them is not repeated. Guarded by
	// tableMu.
	reported  map[string]bool
	suspected func(name string, failed bool) // Config.suspected
	intents   leaveIntents                   // peers that announced they are leaving
	acks      ackWait                        // this member's own announcement, while leaving

	// bg counts goroutines that send leave intents and acks, so that
	// Shutdown can wait for them; bgClosed (under bgMu) stops new ones once
	// Shutdown began.
	bgMu     sync.Mutex
	bgClosed bool
	bg       sync.WaitGroup
}

// Start creates a member, binds its gossip port and, if cfg.Seeds is set,
// joins the cluster through them. It returns an error naming the seeds when
// none of them could be reached, after releasing everything it opened.
func Start(cfg Config) (*Member, error) {
	mc, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	lg = lg.With("member", cfg.NodeName)
	m := &Member{
		name:         cfg.NodeName,
		log:          lg,
		events:       cfg.Events,
		loopDone:     make(chan struct{}),
		tcpTimeout:   mc.TCPTimeout,
		probeTimeout: mc.ProbeTimeout,
		confirm:      min(lifelineConfirm*mc.ProbeInterval, maxConfirm),
		intents:      leaveIntents{until: map[string]time.Time{}},
		table:        map[string]Info{},
		reported:     map[string]bool{},
		suspected:    cfg.suspected,
		lines:        lifelines{conns: map[net.Conn]string{}, dialed: map[string]bool{}},
	}
	m.qcond = sync.NewCond(&m.qmu)
	meta := slices.Clone(cfg.Meta)
	m.meta.Store(&meta)
	h := &hooks{m: m}
	mc.Delegate = h
	mc.Events = h
	mc.Logger = log.New(&logWriter{log: lg.With("component", "memberlist"), closing: &m.closing}, "", 0)

	if cfg.Lifelines {
		if err := m.listenLifelines(mc.BindAddr); err != nil {
			m.closeQueue()
			close(m.loopDone)
			return nil, err
		}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		m.lines.close()
		m.closeQueue()
		close(m.loopDone)
		return nil, fmt.Errorf("membership: %s cannot start gossip on %s:%d: %w", cfg.NodeName, mc.BindAddr, cfg.BindPort, err)
	}
	m.ml = ml
	// Create reported our own join synchronously, so the table has us.
	m.tableMu.Lock()
	m.addr = m.table[m.name].Addr
	m.tableMu.Unlock()
	if m.addr == "" { // not expected; LocalNode is only racy, not wrong
		m.addr = ml.LocalNode().Address()
	}
	// The loop starts only now so that Events, which may call Members, never
	// sees a Member without its memberlist; memberlist's notification of
	// our own Join is queued and delivered first.
	go m.eventLoop()
	if ln := m.lines.ln; ln != nil {
		host, _, _ := net.SplitHostPort(m.addr)
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		m.lines.mu.Lock()
		m.lines.offer = net.JoinHostPort(host, port)
		m.lines.mu.Unlock()
		m.goBackground(m.acceptLifelines)
	}

	if len(cfg.Seeds) > 0 {
		n, err := ml.Join(cfg.Seeds)
		if n == 0 {
			_ = m.Shutdown()
			return nil, fmt.Errorf("membership: %s cannot join the cluster through %s: %w", cfg.NodeName, strings.Join(cfg.Seeds, ", "), err)
		}
		if n < len(cfg.Seeds) {
			lg.Warn("some seeds could not be reached", "seeds", cfg.Seeds, "reached", n)
		}
	}
	lg.Debug("membership started", "addr", m.addr, "seeds", cfg.Seeds)
	return m, nil
}

// Name is this member's NodeName.
func (m *Member) Name() string { return m.name }

// Addr is the gossip address, host:port, that others use as a seed.
func (m *Member) Addr() string { return m.addr }

// Join joins the cluster again through seeds (memberlist's push/pull with
// each): a member whose seed restarted with an empty member list (a
// restarted scheduler) is known to it again, and its lifeline to the seed
// is dialed anew. It returns how many seeds were reached.
func (m *Member) Join(seeds []string) (int, error) {
	n, err := m.ml.Join(seeds)
	if n == 0 && err != nil {
		return 0, fmt.Errorf("membership: %s cannot join the cluster again through %s: %w", m.name, strings.Join(seeds, ", "), err)
	}
	return n, nil
}

// Members lists the live members, this one included until it leaves,
// sorted by name. Members that failed or left are not listed. It may be
// ahead of the events delivered to Events so far. After Shutdown it is the
// last view the member had.
func (m *Member) Members() []Info {
	m.tableMu.Lock()
	out := make([]Info, 0, len(m.table))
	for _, i := range m.table {
		i.Meta = slices.Clone(i.Meta)
		out = append(out, i)
	}
	m.tableMu.Unlock()
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// track updates the member table from a memberlist callback, which holds
// memberlist's node lock, so n is safe to read here. It reports false for
// a departure Suspect reported already.
func (m *Member) track(k Kind, n *memberlist.Node) (Info, bool) {
	i := Info{Name: n.Name, Addr: n.Address(), Meta: slices.Clone(n.Meta)}
	m.tableMu.Lock()
	defer m.tableMu.Unlock()
	if k == Join || k == Update {
		if k == Join {
			delete(m.reported, n.Name) // a new life
		}
		m.table[n.Name] = i
		return i, true
	}
	delete(m.table, n.Name)
	if m.reported[n.Name] {
		delete(m.reported, n.Name)
		return i, false
	}
	return i, true
}

// SetMeta replaces this member's Meta and gossips it (others see Update).
// It waits up to timeout (0 = no limit) for the update to reach another
// member, if there is one.
func (m *Member) SetMeta(meta []byte, timeout time.Duration) error {
	if len(meta) > MetaMaxSize {
		return fmt.Errorf("membership: meta is %d bytes, more than memberlist's limit of %d", len(meta), MetaMaxSize)
	}
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	if m.shutdown {
		return ErrShutdown
	}
	meta = slices.Clone(meta)
	m.meta.Store(&meta)
	if err := m.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("membership: %s: gossiping new meta: %w", m.name, err)
	}
	return nil
}

// Leave tells the cluster this member is leaving on purpose, so that the
// others report Leave rather than Fail. It takes up to timeout (0 = each
// step as long as memberlist needs, the network steps bounded by its stream
// timeout). The member keeps answering gossip until Shutdown, which should
// follow.
//
// memberlist alone does not make this reliable: its callbacks report a
// leave and a death alike (NotifyLeave; v0.7.0 never fills in Node.State),
// and its leave broadcast has a small retransmit budget that probes of a
// dead peer can use up, leaving the others to learn of the leave at the
// next push/pull, 15-30 s later. So Leave runs three steps, each taking at
// most a third of timeout:
//
//  1. send every live member a leave intent over a reliable stream and wait
//     for their acknowledgements (serf does the same with its intents); a
//     member that acknowledged reports this member's departure as Leave;
//  2. broadcast memberlist's leave (this member marks itself left);
//  3. push this member's state, now "left", to every member that
//     acknowledged, with memberlist's own state sync, so that each of them
//     sees the leave at once and gossips it further.
//
// A member that could not be reached may report Fail, which is what it
// observes.
func (m *Member) Leave(timeout time.Duration) error {
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	if m.shutdown {
		return ErrShutdown
	}
	step := 2 * m.tcpTimeout
	if timeout > 0 {
		step = timeout / 3
	}
	acked := m.announceLeave(step, 3*step+intentGrace)
	mlStep := step
	if timeout == 0 {
		mlStep = 0 // memberlist's own "no limit"
	}
	leaveErr := m.ml.Leave(mlStep)
	pushed := m.pushLeft(acked, step)
	if leaveErr != nil && pushed == 0 {
		return fmt.Errorf("membership: %s: leave: %w", m.name, leaveErr)
	}
	return nil
}

// Shutdown stops gossiping at once, without a leave message: to the others
// it looks like a failure unless Leave came first. It returns after the last
// Events call has returned, so it must not be called from Events. It is
// idempotent.
func (m *Member) Shutdown() error {
	m.stateMu.Lock()
	if m.shutdown {
		m.stateMu.Unlock()
		<-m.loopDone
		return nil
	}
	m.shutdown = true
	m.closing.Store(true)
	err := m.ml.Shutdown()
	m.stateMu.Unlock()
	m.bgMu.Lock()
	m.bgClosed = true
	m.bgMu.Unlock()
	m.lines.close() // unblocks the lifeline goroutines
	m.bg.Wait()
	m.closeQueue()
	<-m.loopDone
	if err != nil {
		return fmt.Errorf("membership: %s: shutdown: %w", m.name, err)
	}
	return nil
}

// enqueue records a change in the table and queues its event for the
// loop; it never blocks, because it runs inside memberlist with
// memberlist's node lock held.
func (m *Member) enqueue(k Kind, n *memberlist.Node) {
	i, report := m.track(k, n)
	if !report {
		return
	}
	// The table keeps its own copy of Meta; the event owns this one.
	m.queueEvent(Event{Kind: k, Name: i.Name, Addr: i.Addr, Meta: slices.Clone(i.Meta)})
}

// queueEvent hands e to the event loop; it never blocks.
func (m *Member) queueEvent(e Event) {
	if m.events == nil {
		return
	}
	m.qmu.Lock()
	defer m.qmu.Unlock()
	if m.qclosed {
		return // a late notification racing Shutdown: nobody listens any more
	}
	m.queue = append(m.queue, e)
	m.qcond.Signal()
}

func (m *Member) closeQueue() {
	m.qmu.Lock()
	m.qclosed = true
	m.qcond.Signal()
	m.qmu.Unlock()
}

// eventLoop delivers queued events in order, one at a time. The queue is
// unbounded on purpose: membership changes are few, and memberlist must
// never wait for a slow consumer (its probes would stall and it would
// declare healthy members dead).
func (m *Member) eventLoop() {
	defer close(m.loopDone)
	for {
		m.qmu.Lock()
		for len(m.queue) == 0 && !m.qclosed {
			m.qcond.Wait()
		}
		batch := m.queue
		m.queue = nil
		done := m.qclosed
		m.qmu.Unlock()
		for _, e := range batch {
			m.events(e)
		}
		if done {
			return
		}
	}
}

// hooks implements memberlist's Delegate and EventDelegate without putting
// their methods on Member's API.
type hooks struct{ m *Member }

var (
	_ memberlist.Delegate      = (*hooks)(nil)
	_ memberlist.EventDelegate = (*hooks)(nil)
)

// NodeMeta gives memberlist this member's Meta; SetMeta and validate keep it
// within limit (memberlist panics otherwise).
func (h *hooks) NodeMeta(limit int) []byte {
	meta := *h.m.meta.Load()
	if len(meta) > limit {
		return nil
	}
	return meta
}

// NotifyMsg receives user messages: leave intents and their acks.
func (h *hooks) NotifyMsg(b []byte) { h.m.handleMsg(b) }

// GetBroadcasts carries application gossip, which membership does not
// need; LocalState and MergeRemoteState (push/pull, also on join) carry
// the lifeline offer.
func (h *hooks) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (h *hooks) LocalState(join bool) []byte                { return h.m.lines.localState() }
func (h *hooks) MergeRemoteState(buf []byte, join bool)     { h.m.mergeState(buf) }

// NotifyJoin is called by memberlist with its node lock held.
func (h *hooks) NotifyJoin(n *memberlist.Node) { h.m.enqueue(Join, n) }

// NotifyLeave is called by memberlist for both a leave and a death, with
// nothing in n to tell them apart; a recorded leave intent does. A member
// marks itself dead only when it leaves.
func (h *hooks) NotifyLeave(n *memberlist.Node) {
	k := Fail
	if n.Name == h.m.name || h.m.intents.take(n.Name, time.Now()) {
		k = Leave
	}
	h.m.enqueue(k, n)
}

// NotifyUpdate is called when a member's meta changes.
func (h *hooks) NotifyUpdate(n *memberlist.Node) { h.m.enqueue(Update, n) }

// logWriter turns memberlist's log lines, "[LEVEL] memberlist: text", into
// slog records at the matching level. memberlist takes a *log.Logger, which
// calls Write once per line.
type logWriter struct {
	log *slog.Logger
	// closing, once set, demotes errors about sockets memberlist closed
	// itself: its gossip ticker may still be sending as Shutdown closes the
	// transport, and that is no fault of the job's.
	closing *atomic.Bool
}

var _ io.Writer = (*logWriter)(nil)

func (w *logWriter) Write(p []byte) (int, error) {
	level, msg := parseLogLine(p)
	if level >= slog.LevelWarn && w.closing != nil && w.closing.Load() && strings.Contains(msg, net.ErrClosed.Error()) {
		level = slog.LevelDebug
	}
	ctx := context.Background()
	// memberlist logs every stream connection at DEBUG; skip building the
	// record when the handler would drop it.
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, msg)
	}
	return len(p), nil
}

// parseLogLine splits a memberlist log line into a level and the message
// without its "[LEVEL] memberlist: " prefix. Lines without a known prefix
// are logged whole at INFO.
func parseLogLine(p []byte) (slog.Level, string) {
	p = bytes.TrimRight(p, "\r\n")
	level := slog.LevelInfo
	if len(p) > 0 && p[0] == '[' {
		if i := bytes.IndexByte(p, ']'); i > 0 {
			known := true
			switch string(p[1:i]) {
			case "TRACE", "DEBUG":
				level = slog.LevelDebug
			case "INFO":
				level = slog.LevelInfo
			case "WARN", "WARNING":
				level = slog.LevelWarn
			case "ERR", "ERROR":
				level = slog.LevelError
			default:
				known = false
			}
			if known {
				p = bytes.TrimLeft(p[i+1:], " ")
			}
		}
	}
	p = bytes.TrimPrefix(p, []byte("memberlist: "))
	return level, string(p)
}
