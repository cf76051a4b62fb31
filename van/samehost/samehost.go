// Package samehost implements van.Transport for a tcp job whose nodes
// share hosts (PS_SHM_AUTO=1, or BytePS's BYTEPS_ENABLE_IPC=1, with
// DMLC_PS_VAN_TYPE=tcp): messages to a peer on this host go through
// van/shm, to the others through van/tcp. It is a switch over the two
// vans and holds no protocol of its own.
//
// Bind binds both at one port number: tcp at hostname:port, shm at the
// abstract Unix socket of that port (shm.Addr), so that a peer's address
// in the node table names both. Every node of the job must therefore run
// with the same setting, as with DMLC_LOCAL.
//
// Connect picks the van by the peer's hostname (SameHost: a loopback
// address, one of this host's interface addresses, or a name that resolves
// to one) and Send follows that choice for the peer's id. Recv takes the
// messages of both. Release and Detach go to shm first, which takes back
// the frames that are views of its segments and leaves every other message
// alone, then to tcp, which recycles frames that are ordinary Go memory.
package samehost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/shm"
	"github.com/elasticps/elasticps/van/tcp"
)

// Env and AliasEnv turn same-host selection on for DMLC_PS_VAN_TYPE=tcp.
const (
	Env      = "PS_SHM_AUTO"
	AliasEnv = "BYTEPS_ENABLE_IPC"
)

// Enabled reports whether Env (or AliasEnv) is 1 in getenv (os.LookupEnv
// or a stand-in). Unset, empty and 0 are off; other values are an error.
func Enabled(getenv func(string) (string, bool)) (bool, error) {
	on := false
	for _, name := range []string{Env, AliasEnv} {
		v, _ := getenv(name)
		switch strings.TrimSpace(v) {
		case "", "0":
		case "1":
			on = true
		default:
			return false, fmt.Errorf("van/samehost: %s=%q is invalid: expected 1 (peers on this host over shared memory) or 0", name, v)
		}
	}
	return on, nil
}

// Config configures a Transport: each van's own Config, and how a peer's
// host is told apart.
type Config struct {
	TCP tcp.Config
	SHM shm.Config

	// SameHost reports whether a peer with this hostname is on this host.
	// nil: SameHost.
	SameHost func(hostname string) bool
}

// bindRetries bounds how often Bind tries another random port whose shm
// socket another process holds.
const bindRetries = 20

// Transport is a van.Transport over van/shm for peers on this host and
// van/tcp for the others. Create it with New and release it with Close.
type Transport struct {
	cfg      Config
	sameHost func(string) bool
	shm      *shm.Transport
	inbox    chan item
	done     chan struct{}
	wg       sync.WaitGroup

	// mu guards tcp (replaced when Bind retries a port) and via.
	mu    sync.RWMutex
	tcp   *tcp.Transport
	bound bool
	via   map[int32]van.Transport // the van each connected peer id is sent on

	closeOnce sync.Once
}

var _ van.Transport = (*Transport)(nil)

type item struct {
	msg *message.Message
	err error
}

var errNotBound = errors.New("van/samehost: Recv before Bind")

// New creates a Transport. It opens no socket until Bind or Connect.
func New(cfg Config) (*Transport, error) {
	if cfg.TCP.Encryption != nil {
		return nil, fmt.Errorf("van/samehost: PS_ENCRYPT=on and %s=1 do not go together: the shm van has no encryption; unset %s (and %s) to encrypt every connection over tcp", Env, Env, AliasEnv)
	}
	tt, err := tcp.New(cfg.TCP)
	if err != nil {
		return nil, err
	}
	st, err := shm.New(cfg.SHM)
	if err != nil {
		_ = tt.Close()
		return nil, err
	}
	t := &Transport{cfg: cfg, sameHost: cfg.SameHost, tcp: tt, shm: st,
		inbox: make(chan item), done: make(chan struct{}), via: map[int32]van.Transport{}}
	if t.sameHost == nil {
		t.sameHost = SameHost
	}
	return t, nil
}

// Bind implements van.Transport: tcp binds as it would alone, then shm at
// the same port number. When the caller let the port be picked and
// another process holds that number's shm socket, Bind tries another
// random port, up to 20 times.
func (t *Transport) Bind(node message.Node, maxRetry int) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed() {
		return 0, van.ErrClosed
	}
	if t.bound {
		return 0, errors.New("van/samehost: Bind called twice")
	}
	picked := node.Port == message.Empty || node.Port <= 0
	for attempt := 0; ; attempt++ {
		port, err := t.tcp.Bind(node, maxRetry)
		if err != nil {
			return 0, err
		}
		at := node
		at.Port = int32(port)
		_, err = t.shm.Bind(at, 0)
		if err == nil {
			t.bound = true
			t.wg.Add(2)
			go t.pump(t.tcp)
			go t.pump(t.shm)
			return port, nil
		}
		if !picked || !errors.Is(err, syscall.EADDRINUSE) || attempt >= bindRetries || len(t.via) > 0 {
			return 0, fmt.Errorf("van/samehost: tcp bound port %d, but its shm socket: %w", port, err)
		}
		// Start over with an unbound tcp van (one may bind only once).
		_ = t.tcp.Close()
		if t.tcp, err = tcp.New(t.cfg.TCP); err != nil {
			return 0, err
		}
	}
}

// pump hands the messages of one van to Recv.
func (t *Transport) pump(tr van.Transport) {
	defer t.wg.Done()
	for {
		m, err := tr.Recv()
		if errors.Is(err, van.ErrClosed) {
			return
		}
		select {
		case t.inbox <- item{m, err}:
		case <-t.done:
			if m != nil {
				t.Release(m)
			}
			return
		}
	}
}

// Recv implements van.Transport: the next message of either van. Messages
// of one peer arrive in order as long as its van does not change (Connect
// to the same id at another host).
func (t *Transport) Recv() (*message.Message, error) {
	if t.closed() {
		return nil, van.ErrClosed
	}
	t.mu.RLock()
	bound := t.bound
	t.mu.RUnlock()
	if !bound {
		return nil, errNotBound
	}
	select {
	case it := <-t.inbox:
		return it.msg, it.err
	case <-t.done:
		return nil, van.ErrClosed
	}
}

// Connect implements van.Transport: the peer is connected through shm if
// SameHost says it is on this host, through tcp otherwise, and later Sends
// to node.ID take that van.
func (t *Transport) Connect(node message.Node, myID int32) error {
	if t.closed() {
		return van.ErrClosed
	}
	near := t.sameHost(node.Hostname) // may look the name up: not under mu
	t.mu.Lock()
	defer t.mu.Unlock()
	var tr van.Transport = t.tcp
	if near {
		tr = t.shm
	}
	if err := tr.Connect(node, myID); err != nil {
		return err
	}
	t.via[node.ID] = tr
	return nil
}

// Send implements van.Transport through the van Connect chose for
// msg.Meta.Recver.
func (t *Transport) Send(msg *message.Message) (int, error) {
	if err := message.CheckFrames(&msg.Meta, len(msg.Data)); err != nil {
		return 0, fmt.Errorf("van/samehost: send to node %d: %w", msg.Meta.Recver, err)
	}
	t.mu.RLock()
	tr := t.via[msg.Meta.Recver]
	t.mu.RUnlock()
	if tr == nil {
		if t.closed() {
			return 0, van.ErrClosed
		}
		return 0, fmt.Errorf("van/samehost: no connection to node %d; was it connected?", msg.Meta.Recver)
	}
	return tr.Send(msg)
}

// Release implements van.Transport. shm releases the messages whose frames
// are views of its segments (and clears their frames); tcp then takes back
// the frames that are left, which are Go memory whichever van they came
// from.
func (t *Transport) Release(msg *message.Message) {
	t.shm.Release(msg)
	t.tcpVan().Release(msg)
}

// Detach implements van.Transport: only shm delivers views.
func (t *Transport) Detach(msg *message.Message) { t.shm.Detach(msg) }

func (t *Transport) tcpVan() *tcp.Transport {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.tcp
}

func (t *Transport) closed() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Close implements van.Transport: it closes both vans and waits for the
// goroutines that read them.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		close(t.done)
		t.mu.RLock()
		tt := t.tcp
		t.mu.RUnlock()
		_ = tt.Close()
		_ = t.shm.Close()
		t.wg.Wait()
	})
	return nil
}

// lookupTimeout bounds the name lookup of a peer's hostname.
const lookupTimeout = 2 * time.Second

// SameHost reports whether hostname is this host: a loopback or
// unspecified address, an address of one of this host's interfaces, or a
// name ("localhost", os.Hostname, a DNS name) that resolves to one. A name
// that does not resolve is another host's (tcp will say why it cannot
// reach it).
func SameHost(hostname string) bool {
	if ip := net.ParseIP(hostname); ip != nil {
		return van.LocalIP(ip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", hostname)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if van.LocalIP(ip) {
			return true
		}
	}
	return false
}
