package postoffice

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/prometheus/client_golang/prometheus"
)

// Join authentication and the authority of control messages (issue 23;
// the protocol is in docs/security.md).
//
// With a token (PS_AUTH_TOKEN), a message from a peer id is acted on only
// once that peer answered a challenge: the receiver sends AUTH_CHALLENGE
// with a fresh nonce over its own path to the id (the address the job
// knows for it, not the one a stranger uses), the peer answers AUTH_PROOF
// with an HMAC-SHA256 of the nonce and both ids. What arrives from the id
// meanwhile is held, bounded, and delivered in order once the proof
// checks. An ADD_NODE comes from a node that has no id yet, so it is
// preceded by AUTH_REGISTER: an HMAC over the node's own nonce and the
// address it registers (a replay can only register that address again).
// Authority checks that need no token (TERMINATE and barrier releases
// only from the scheduler) apply always.

// Auth control commands, in elasticps's range (64+; scheduler has 64-68).
const (
	CmdAuthChallenge message.Command = 80
	CmdAuthProof     message.Command = 81
	CmdAuthRegister  message.Command = 82
)

const (
	authNonceLen = 32
	// authHoldMsgs and authHoldBytes bound what is held per peer id
	// until it proves itself; beyond them messages are refused.
	authHoldMsgs  = 4096
	authHoldBytes = 64 << 20
	// authRechallenge is how long an unanswered challenge stands before
	// a message from the peer triggers a new one.
	authRechallenge = time.Second
	// authRegisterWindow is how long a registration proof admits
	// ADD_NODEs for its address (resends included).
	authRegisterWindow = 30 * time.Second
	authMaxRegistered  = 4096
)

// Reasons of elasticps_auth_refused_total.
const (
	refuseUnproven  = "unproven"     // held too much, or gone, before proving
	refuseAnonymous = "anonymous"    // no id, and not a registration
	refuseBadProof  = "bad_proof"    // AUTH_PROOF / AUTH_REGISTER did not check
	refuseNoProof   = "no_proof"     // ADD_NODE without a registration proof
	refuseUnknown   = "unknown_peer" // no path to the id to challenge it
	refuseNotSched  = "not_scheduler"
	refuseWrongNode = "wrong_node" // a HEARTBEAT naming another node
	refuseHandshake = "handshake"  // auth message not for this node
	// refuseIdentity: the connection announced the sender's id without
	// the tag only a token holder can make (van/internal/peerauth)
	refuseIdentity = "identity"
)

const unverifiedDetail = "the connection announced this id without the job's tag (PS_AUTH_TOKEN): not the node it names"

// MetricAuthRefused counts messages refused for authentication or
// authority, by reason.
const MetricAuthRefused = "elasticps_auth_refused_total"

type authPeer struct {
	nonce  []byte
	sentAt time.Time
	held   []*message.Message
	bytes  int
}

type regEntry struct {
	at    time.Time
	nonce []byte
	node  message.Node
	sent  bool // the scheduler proved itself to the node
}

type authGate struct {
	key     []byte
	refused *prometheus.CounterVec

	mu         sync.Mutex
	lease      time.Duration       // how long a proof stands
	proven     map[int32]time.Time // peer id -> when it last proved itself
	pending    map[int32]*authPeer
	ready      []*message.Message      // proven peers' held messages, in order
	registered map[string]regEntry     // address -> registration proof
	regSent    map[string]message.Node // nonces of this node's AUTH_REGISTERs
	usedNonces map[string]struct{}     // registration nonces seen
}

func newAuthGate(key []byte, role string, lease time.Duration) *authGate {
	return &authGate{
		key: key, lease: lease,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricAuthRefused, Help: "Messages refused: the peer had not proven it holds the job's token, or may not send that control message.",
			ConstLabels: prometheus.Labels{"role": role},
		}, []string{"reason"}),
		proven: map[int32]time.Time{}, pending: map[int32]*authPeer{},
		registered: map[string]regEntry{}, regSent: map[string]message.Node{}, usedNonces: map[string]struct{}{},
	}
}

// authMAC is the proof: HMAC-SHA256(token, label || nonce || fields).
func authMAC(key []byte, label string, nonce []byte, fields ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("elasticps-auth-v1 " + label))
	h.Write(nonce)
	for _, f := range fields {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write(f)
	}
	return h.Sum(nil)
}

func be32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

func nodeFields(n message.Node) [][]byte {
	return [][]byte{[]byte(n.Role.String()), []byte(n.Hostname), be32(n.Port), be32(n.CustomerID), be32(n.ID)}
}

func newNonce() []byte {
	b := make([]byte, authNonceLen)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}

// refuse counts a refused message and logs it, once per peer and reason
// per LogInterval (the node's rate-limited logger): a stranger's flood
// costs a few lines, not one per message.
func (p *Postoffice) refuse(m *message.Message, reason string, detail string) {
	p.auth.refused.WithLabelValues(reason).Inc()
	p.stats.Rejected.Add(1)
	peer := m.Meta.Sender
	p.ratelog.Log(slog.LevelWarn, peerName(peer), reason, "refused a message (counted in "+MetricAuthRefused+")",
		"addr", p.addrOfID(peer), "cmd", m.Meta.Control.Cmd.String(), "detail", detail)
}

func peerName(id int32) string {
	if id == message.Empty {
		return "anonymous"
	}
	return fmt.Sprint(id)
}

// addrOfID is the address the job knows for id ("" if none).
func (p *Postoffice) addrOfID(id int32) string {
	if id == message.SchedulerID {
		return fmt.Sprintf("%s:%d", p.cfg.SchedulerHost, p.cfg.SchedulerPort)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, i := range p.connected {
		if i == id {
			return a
		}
	}
	return ""
}

// recv returns the next message the node may act on: held messages of a
// peer that just proved itself first, then what the transport delivers
// and the gate admits.
func (p *Postoffice) recv() (*message.Message, error) {
	g := p.auth
	for {
		g.mu.Lock()
		if len(g.ready) > 0 {
			m := g.ready[0]
			g.ready[0] = nil
			g.ready = g.ready[1:]
			g.mu.Unlock()
			return m, nil
		}
		g.mu.Unlock()
		m, err := p.tr.Recv()
		if err != nil {
			return nil, err
		}
		if p.admit(m) {
			return m, nil
		}
	}
}

// admit decides what happens to m: true to act on it now; otherwise it was
// consumed (a handshake message, held, or refused and released).
func (p *Postoffice) admit(m *message.Message) bool {
	g := p.auth
	if g.key == nil {
		return p.authorized(m)
	}
	switch m.Meta.Control.Cmd {
	case CmdAuthChallenge, CmdAuthProof, CmdAuthRegister, message.CmdAddNode:
		if m.UnverifiedSender {
			p.refuseRelease(m, refuseIdentity, unverifiedDetail)
			return false
		}
	}
	switch m.Meta.Control.Cmd {
	case CmdAuthChallenge:
		p.answerChallenge(m)
		return false
	case CmdAuthProof:
		p.checkProof(m)
		return false
	case CmdAuthRegister:
		p.checkRegister(m)
		return false
	case message.CmdAddNode:
		if p.driver != nil {
			// the scheduler: a registration proof, not a connection's,
			// admits it (the node has no id yet, or its id is unknown to
			// a restarted scheduler)
			if !p.registeredAddr(m) {
				p.refuseRelease(m, refuseNoProof, fmt.Sprintf("ADD_NODE for %v without a valid AUTH_REGISTER for that address", m.Meta.Control.Nodes))
				return false
			}
			return p.authorized(m)
		}
	}
	if !p.authorized(m) {
		return false
	}
	if m.Meta.Sender == message.Empty {
		p.refuseRelease(m, refuseAnonymous, "only a registration may come from a node without an id")
		return false
	}
	if m.UnverifiedSender {
		// a stranger using a live node's id: refused before its proof
		// could vouch for it
		p.refuseRelease(m, refuseIdentity, unverifiedDetail)
		return false
	}
	return p.provenPeer(m)
}

// authorized applies the checks that need no token.
func (p *Postoffice) authorized(m *message.Message) bool {
	from := m.Meta.Sender
	switch cmd := m.Meta.Control.Cmd; {
	case cmd == message.CmdTerminate:
		// the scheduler's, or this node's own to stop its receive loop
		if from != message.SchedulerID && (from == message.Empty || from != p.myID.Load()) {
			p.refuseRelease(m, refuseNotSched, "TERMINATE from a node other than the scheduler")
			return false
		}
	case isBarrierCmd(cmd) && !m.Meta.Request:
		if from != message.SchedulerID {
			p.refuseRelease(m, refuseNotSched, "barrier release from a node other than the scheduler")
			return false
		}
	case cmd == message.CmdHeartbeat:
		for _, n := range m.Meta.Control.Nodes {
			if n.ID != from {
				p.refuseRelease(m, refuseWrongNode, fmt.Sprintf("HEARTBEAT names node %d", n.ID))
				return false
			}
		}
	case cmd == CmdAuthChallenge || cmd == CmdAuthProof || cmd == CmdAuthRegister:
		// an open job: nothing to prove; a peer with a token set
		p.refuseRelease(m, refuseHandshake, "authentication message, but PS_AUTH_TOKEN is not set on this node")
		return false
	}
	return true
}

func (p *Postoffice) refuseRelease(m *message.Message, reason, detail string) {
	p.refuse(m, reason, detail)
	p.Release(m)
}

// provenPeer reports whether m's sender proved itself; if not, m is held
// (or refused) and the sender challenged.
func (p *Postoffice) provenPeer(m *message.Message) bool {
	g := p.auth
	from := m.Meta.Sender
	g.mu.Lock()
	pp := g.pending[from]
	if pp == nil {
		pp = &authPeer{}
		g.pending[from] = pp
	}
	if at, ok := g.proven[from]; ok {
		age := time.Since(at)
		if age < g.lease {
			// past half its lease, a proof is renewed while
			// messages still flow
			var nonce []byte
			if age >= g.lease/2 && time.Since(pp.sentAt) >= min(authRechallenge, g.lease/4) {
				pp.nonce, pp.sentAt = newNonce(), time.Now()
				nonce = pp.nonce
			}
			g.mu.Unlock()
			if nonce != nil {
				_ = p.challenge(m, nonce) // without an answer the lease runs out
			}
			return true
		}
		// expired: a node that died cannot renew it, so a stranger
		// speaking under its id is held from here on
		delete(g.proven, from)
	}
	if time.Since(pp.sentAt) >= authRechallenge {
		pp.nonce, pp.sentAt = newNonce(), time.Now()
		g.mu.Unlock()
		if !p.challenge(m, pp.nonce) {
			g.mu.Lock()
			if g.pending[from] == pp && len(pp.held) == 0 {
				delete(g.pending, from) // no path to it: nothing to wait for
			}
			g.mu.Unlock()
			p.refuseRelease(m, refuseUnknown, "the job knows no node with this id to challenge")
			return false
		}
		g.mu.Lock()
	}
	size := messageBytes(m)
	hold := len(pp.held) < authHoldMsgs && pp.bytes+size <= authHoldBytes
	if hold {
		p.Detach(m)
		pp.held = append(pp.held, m)
		pp.bytes += size
	}
	g.mu.Unlock()
	if !hold {
		p.refuseRelease(m, refuseUnproven, "held too much from a peer that has not proven itself")
	}
	return false
}

// challenge sends nonce to m's sender, at the address the job knows for
// it; false when there is no path to that id.
func (p *Postoffice) challenge(m *message.Message, nonce []byte) bool {
	c := &message.Message{Meta: message.NewMeta()}
	c.Meta.Control.Cmd = CmdAuthChallenge
	c.Meta.Recver = m.Meta.Sender
	c.Meta.Sender = p.myID.Load()
	c.Meta.Body = nonce
	if _, err := p.tr.Send(c); err != nil {
		p.vlog(1, "cannot challenge a peer", "peer", m.Meta.Sender, "err", err)
		return false
	}
	return true
}

// answerChallenge proves this node to the challenger.
func (p *Postoffice) answerChallenge(m *message.Message) {
	me := p.myID.Load()
	nonce := m.Meta.Body
	if me == message.Empty || m.Meta.Sender == message.Empty || len(nonce) != authNonceLen {
		p.refuseRelease(m, refuseHandshake, "AUTH_CHALLENGE without a nonce or a challenger id")
		return
	}
	r := &message.Message{Meta: message.NewMeta()}
	r.Meta.Control.Cmd = CmdAuthProof
	r.Meta.Recver = m.Meta.Sender
	r.Meta.Sender = me
	r.Meta.Body = append(append([]byte{}, nonce...), authMAC(p.auth.key, "conn", nonce, be32(me), be32(m.Meta.Sender))...)
	p.Release(m)
	if _, err := p.tr.Send(r); err != nil {
		p.vlog(1, "cannot answer an AUTH_CHALLENGE", "challenger", r.Meta.Recver, "err", err)
	}
}

// checkProof admits the sender once its proof checks, and delivers what
// was held from it.
func (p *Postoffice) checkProof(m *message.Message) {
	g := p.auth
	from, body := m.Meta.Sender, m.Meta.Body
	g.mu.Lock()
	pp := g.pending[from]
	ok := pp != nil && pp.nonce != nil && len(body) == authNonceLen+sha256.Size &&
		hmac.Equal(body[:authNonceLen], pp.nonce) &&
		hmac.Equal(body[authNonceLen:], authMAC(g.key, "conn", pp.nonce, be32(from), be32(p.myID.Load())))
	if !ok && from == message.SchedulerID && len(body) == authNonceLen+sha256.Size {
		// the scheduler answers this node's registration
		if n, sent := g.regSent[string(body[:authNonceLen])]; sent &&
			hmac.Equal(body[authNonceLen:], authMAC(g.key, "scheduler", body[:authNonceLen], nodeFields(n)...)) {
			delete(g.regSent, string(body[:authNonceLen]))
			ok = true
			if pp == nil {
				pp = &authPeer{}
			}
		}
	}
	if ok {
		g.proven[from] = time.Now()
		g.ready = append(g.ready, pp.held...)
		delete(g.pending, from)
	}
	g.mu.Unlock()
	if !ok {
		p.refuseRelease(m, refuseBadProof, "AUTH_PROOF does not answer this node's challenge")
		return
	}
	p.vlog(1, "peer proved it holds the job's token", "peer", from)
	p.Release(m)
}

// registrationProof is the AUTH_REGISTER that goes before an ADD_NODE
// for n.
func (p *Postoffice) registrationProof(n message.Node) *message.Message {
	nonce := newNonce()
	r := &message.Message{Meta: message.NewMeta()}
	r.Meta.Control.Cmd = CmdAuthRegister
	r.Meta.Recver = message.SchedulerID
	r.Meta.Sender = p.myID.Load()
	r.Meta.Control.Nodes = []message.Node{n}
	r.Meta.Body = append(nonce, authMAC(p.auth.key, "register", nonce, nodeFields(n)...)...)
	p.auth.mu.Lock()
	if len(p.auth.regSent) >= 64 {
		clear(p.auth.regSent)
	}
	p.auth.regSent[string(nonce)] = n
	p.auth.mu.Unlock()
	return r
}

// checkRegister records a valid registration proof for its address.
func (p *Postoffice) checkRegister(m *message.Message) {
	g := p.auth
	body := m.Meta.Body
	if p.driver == nil || len(m.Meta.Control.Nodes) != 1 || len(body) != authNonceLen+sha256.Size ||
		!hmac.Equal(body[authNonceLen:], authMAC(g.key, "register", body[:authNonceLen], nodeFields(m.Meta.Control.Nodes[0])...)) {
		p.refuseRelease(m, refuseBadProof, "AUTH_REGISTER does not carry a valid proof")
		return
	}
	nonce := string(body[:authNonceLen])
	now := time.Now()
	g.mu.Lock()
	_, replay := g.usedNonces[nonce]
	if !replay {
		if len(g.usedNonces) >= authMaxRegistered {
			clear(g.usedNonces) // the window still bounds a replay's use
		}
		g.usedNonces[nonce] = struct{}{}
		for a, e := range g.registered {
			if now.Sub(e.at) > authRegisterWindow {
				delete(g.registered, a)
			}
		}
		n := m.Meta.Control.Nodes[0]
		g.registered[regKey(n)] = regEntry{at: now, nonce: body[:authNonceLen:authNonceLen], node: n}
	}
	g.mu.Unlock()
	if replay {
		p.refuseRelease(m, refuseBadProof, "AUTH_REGISTER replayed")
		return
	}
	p.Release(m)
}

func regKey(n message.Node) string {
	return fmt.Sprintf("%s|%s:%d", n.Role, n.Hostname, n.Port)
}

// registeredAddr reports whether m, an ADD_NODE, follows a valid
// registration proof for the node it registers.
func (p *Postoffice) registeredAddr(m *message.Message) bool {
	if len(m.Meta.Control.Nodes) != 1 {
		return false
	}
	g := p.auth
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.registered[regKey(m.Meta.Control.Nodes[0])]
	return ok && time.Since(e.at) <= authRegisterWindow
}

// forgetPeer makes id prove itself again (it died, left, or another
// process took its id); what was held from it is dropped.
func (p *Postoffice) forgetPeer(id int32) {
	g := p.auth
	g.mu.Lock()
	delete(g.proven, id)
	var held []*message.Message
	if pp := g.pending[id]; pp != nil {
		held = pp.held
		delete(g.pending, id)
	}
	g.mu.Unlock()
	for _, m := range held {
		p.refuse(m, refuseUnproven, "its node is gone")
		p.Release(m)
	}
}

// beforeAddNode sends the registration proof an ADD_NODE to the
// scheduler needs in a job with a token.
func (p *Postoffice) beforeAddNode(m *message.Message) error {
	if p.auth.key == nil || m.Meta.Control.Cmd != message.CmdAddNode || m.Meta.Recver != message.SchedulerID || len(m.Meta.Control.Nodes) != 1 {
		return nil
	}
	_, err := p.tr.Send(p.registrationProof(m.Meta.Control.Nodes[0]))
	return err
}

// proveScheduler sends, before the scheduler's node list m reaches a node
// that registered with a proof, the scheduler's own proof over that
// registration's nonce (the node has no path yet on which to challenge
// the scheduler).
func (p *Postoffice) proveScheduler(m *message.Message) {
	g := p.auth
	if g.key == nil || m.Meta.Control.Cmd != message.CmdAddNode || m.Meta.Recver == message.SchedulerID {
		return
	}
	for _, n := range m.Meta.Control.Nodes {
		if n.ID != m.Meta.Recver {
			continue
		}
		g.mu.Lock()
		e, ok := g.registered[regKey(n)]
		first := ok && !e.sent
		if first {
			e.sent = true
			g.registered[regKey(n)] = e
		}
		g.mu.Unlock()
		if !first {
			return
		}
		r := &message.Message{Meta: message.NewMeta()}
		r.Meta.Control.Cmd = CmdAuthProof
		r.Meta.Recver = m.Meta.Recver
		r.Meta.Sender = message.SchedulerID
		r.Meta.Body = append(append([]byte{}, e.nonce...), authMAC(g.key, "scheduler", e.nonce, nodeFields(e.node)...)...)
		if _, err := p.tr.Send(r); err != nil {
			p.log.Warn("cannot prove the scheduler to a registering node", "node", n.String(), "err", err)
		}
		return
	}
}
