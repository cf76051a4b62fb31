//go:build cgo

package zmq

// #include <zmq.h>
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

const (
	// maxSockets is ZMQ_MAX_SOCKETS for the context, as in ps-lite: one
	// DEALER per peer adds up in large jobs and libzmq's default is 1023.
	maxSockets = 65536

	// retryPortMin and retryPortMax bound the random ports Bind falls back
	// to when the requested one is taken: [retryPortMin, retryPortMax).
	retryPortMin, retryPortMax = 10000, 50000

	// replacedLinger is how long a DEALER replaced by Connect may keep
	// flushing messages queued before the replacement. Unbounded would let
	// Close hang on a dead peer; zero would silently drop messages whose
	// Send already returned.
	replacedLinger = time.Second
)

// Transport is a van.Transport over ZeroMQ. Create it with New and release it
// with Close, which must be called: it terminates the libzmq context.
//
// Send and Connect may be called concurrently. Recv must be called from one
// goroutine at a time and only after Bind.
type Transport struct {
	cfg Config
	log *slog.Logger
	ctx *zctx

	// myID is the latest own id given to Connect (message.Empty before
	// registration); Recv reports it as Meta.Recver.
	myID atomic.Int32

	// closed is set once, while holding mu, before the context is
	// terminated; it is atomic so that Recv and Send may read it without mu.
	closed atomic.Bool

	// mu guards peers. It is also held (write) whenever a socket is created,
	// which is what orders socket creation before Close's context
	// termination (libzmq forbids creating sockets on a terminated context,
	// and zmq4.Context is not safe to use during Term). Lock order: recvMu
	// before mu, and a peer's mu before mu; never take a peer's mu while
	// holding mu, since a Send may block inside it. A peer is removed from
	// peers before its socket is closed, so every peer found here has an
	// open socket.
	mu    sync.RWMutex
	peers map[int32]*peer

	// recvMu is held by Recv for its whole duration (including the
	// blocking receive), by Bind and by Close: it makes the ROUTER owned by
	// whoever holds it, since libzmq sockets must not be used concurrently.
	recvMu sync.Mutex
	router *zsocket    // guarded by recvMu; nil until Bind succeeds
	in     *inBuf      // guarded by recvMu; the frames of the last message
	idents identCache  // guarded by recvMu; identity.go
	bound  atomic.Bool // router != nil; readable without recvMu
	// dealerIn receives what fork nodes answer on DEALERs (dealerin.go);
	// nil unless PS_WIRE=bytedance. Guarded by recvMu.
	dealerIn *dealerIn

	// ipcFile is the socket file Bind created in Local mode (nil
	// otherwise). libzmq leaves it behind; Close removes it if it is still
	// ours. Guarded by recvMu.
	ipcFile *ipcFile

	curve *curve // CURVE keys and ZAP handler; nil without encryption (curve.go)

	closeOnce sync.Once
	closeErr  error
}

var _ van.Transport = (*Transport)(nil)

// peer is the sending side of one connection: a DEALER and the C buffers
// its messages are staged in.
type peer struct {
	mu    sync.Mutex     // serialises Send: libzmq sockets are not thread-safe
	sock  *zsocket       // guarded by mu; nil once closed (replaced, failed or Close)
	out   outBuf         // guarded by mu; freed with the socket
	addr  string         // endpoint dialled; immutable
	ident string         // ZMQ_IDENTITY, "" if anonymous; immutable
	fwd   *dealerForward // guarded by mu; nil unless answers arrive on sock (dealerin.go)
}

// New creates a Transport with its own ZeroMQ context. It opens no socket
// until Bind or Connect.
func New(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if !cfg.KeepMalloc {
		tuneMalloc(cfg.Logger)
	}
	ctx, err := newContext()
	if err != nil {
		return nil, fmt.Errorf("van/zmq: new context: %w", err)
	}
	if err := ctx.setInt(ctxMaxSockets, maxSockets); err != nil {
		_ = ctx.term()
		return nil, fmt.Errorf("van/zmq: set ZMQ_MAX_SOCKETS=%d: %w", maxSockets, err)
	}
	t := &Transport{cfg: cfg, log: cfg.Logger, ctx: ctx, peers: make(map[int32]*peer)}
	t.myID.Store(message.Empty)
	if cfg.Encryption != nil {
		if err := t.startCurve(); err != nil {
			_ = ctx.term()
			return nil, err
		}
	}
	return t, nil
}

// newSocket creates a socket with LINGER 0, so that neither closing it nor
// terminating the context ever waits for unsent messages. Caller holds
// t.mu (write) and has checked t.closed.
func (t *Transport) newSocket(typ int) (*zsocket, error) {
	s, err := t.ctx.socket(C.int(typ))
	if err != nil {
		return nil, err
	}
	if err := s.setInt(optLinger, 0); err != nil {
		_ = s.close()
		return nil, err
	}
	return s, nil
}

// Bind implements van.Transport. It listens on tcp://host:port (ipc:///tmp/port
// when Config.Local), where host is node.Hostname, 0.0.0.0 when
// Config.BindAll, or all interfaces when the hostname is empty. Only an
// address already in use is retried; any other failure (say, a hostname
// that is not a local address) is returned at once. Bind may be called once.
func (t *Transport) Bind(node message.Node, maxRetry int) (int, error) {
	if t.bound.Load() {
		return 0, errors.New("van/zmq: Bind called twice")
	}
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return 0, van.ErrClosed
	}
	if t.router != nil {
		return 0, errors.New("van/zmq: Bind called twice")
	}
	in, err := newInBuf(t.cfg.Limits.MaxFrames)
	if err != nil {
		return 0, err
	}
	sock, err := t.newSocket(sockRouter)
	if err != nil {
		in.free()
		return 0, fmt.Errorf("van/zmq: new ROUTER socket: %w", err)
	}
	port, err := t.bindRetry(sock, node, maxRetry)
	if err != nil {
		_ = sock.close()
		in.free()
		return 0, err
	}
	if err := t.startDealerIn(); err != nil {
		_ = sock.close()
		in.free()
		return 0, err
	}
	t.router, t.in = sock, in
	t.bound.Store(true)
	return port, nil
}

func (t *Transport) bindRetry(sock *zsocket, node message.Node, maxRetry int) (int, error) {
	// A single frame above the limit can never make a valid message; with
	// ZMQ_MAXMSGSIZE libzmq drops such a peer instead of buffering it.
	if err := sock.setInt64(optMaxMsgSize, t.cfg.Limits.MaxMessageBytes); err != nil {
		return 0, fmt.Errorf("van/zmq: set ZMQ_MAXMSGSIZE: %w", err)
	}
	// When a peer reconnects with the same identity (say, a node restarted
	// with its old id) while the ROUTER still holds the old connection,
	// hand the identity over to the newcomer. Without handover libzmq parks
	// the newcomer until the old connection is gone *and* the newcomer
	// sends again, which may be never. The price: messages the old
	// connection still has in flight arrive under a random identity
	// (Sender = Empty). Connect never creates such pairs itself: it keeps
	// an identical DEALER instead of replacing it. With a token only a
	// node's own processes can present its identity (identity.go).
	if err := sock.setInt(optRouterHandover, 1); err != nil {
		return 0, fmt.Errorf("van/zmq: set ZMQ_ROUTER_HANDOVER: %w", err)
	}
	if err := t.curveServer(sock); err != nil {
		return 0, err
	}
	host := node.Hostname
	switch {
	case t.cfg.BindAll:
		host = "0.0.0.0"
	case host == "":
		host = "*"
	}
	if isIPv6(host) {
		if err := sock.setInt(optIPv6, 1); err != nil {
			return 0, fmt.Errorf("van/zmq: set ZMQ_IPV6: %w", err)
		}
	}
	port := int(node.Port)
	pick := port == 0 || node.Port == message.Empty
	for attempt := 0; ; attempt++ {
		bound, endpoint, err := t.tryBind(sock, host, port, pick)
		if err == nil {
			t.log.Debug("van/zmq: bound", "endpoint", endpoint)
			return bound, nil
		}
		if !errors.Is(err, errAddrInUse) {
			return 0, fmt.Errorf("van/zmq: bind %s: %w", endpoint, err)
		}
		if attempt >= maxRetry {
			return 0, fmt.Errorf("van/zmq: bind %s: %w (gave up after %d random retries)", endpoint, err, maxRetry)
		}
		t.log.Debug("van/zmq: address in use, retrying on a random port", "endpoint", endpoint)
		port, pick = retryPortMin+rand.IntN(retryPortMax-retryPortMin), false
	}
}

// errAddrInUse marks a bind failure that a retry on another port may fix.
var errAddrInUse = errors.New("address already in use")

// tryBind binds sock once and returns the bound port and the endpoint tried.
func (t *Transport) tryBind(sock *zsocket, host string, port int, pick bool) (int, string, error) {
	if t.cfg.Local {
		if pick {
			var err error
			if port, err = freeIPCPort(); err != nil {
				return 0, "ipc:///tmp/<free port>", err
			}
		}
		path := ipcPath(port)
		endpoint := "ipc://" + path
		// libzmq unlinks an existing socket file before binding, which
		// would silently steal the address from a live process; treat a
		// path that accepts connections as taken.
		if ipcInUse(path) {
			return 0, endpoint, errAddrInUse
		}
		if err := sock.bind(endpoint); err != nil {
			return 0, endpoint, err
		}
		if fi, err := os.Stat(path); err == nil {
			t.ipcFile = &ipcFile{path, fi}
		}
		return port, endpoint, nil
	}
	if !pick {
		endpoint := tcpEndpoint(host, strconv.Itoa(port))
		err := sock.bind(endpoint)
		if err == errInUse {
			err = errAddrInUse
		}
		return port, endpoint, err
	}
	// Let libzmq (the kernel) pick the port: unlike probing for a free port
	// and binding it afterwards, this cannot race with other processes.
	endpoint := tcpEndpoint(host, "*")
	if err := sock.bind(endpoint); err != nil {
		return 0, endpoint, err
	}
	last, err := sock.lastEndpoint()
	if err != nil {
		return 0, endpoint, fmt.Errorf("reading ZMQ_LAST_ENDPOINT: %w", err)
	}
	i := strings.LastIndexByte(last, ':')
	bound, err := strconv.Atoi(last[i+1:])
	if err != nil {
		return 0, endpoint, fmt.Errorf("parsing ZMQ_LAST_ENDPOINT %q: %w", last, err)
	}
	return bound, last, nil
}

// freeIPCPort picks a port number whose ipc path nobody listens on.
func freeIPCPort() (int, error) {
	for range 100 {
		p := retryPortMin + rand.IntN(retryPortMax-retryPortMin)
		if !ipcInUse(ipcPath(p)) {
			return p, nil
		}
	}
	return 0, errAddrInUse
}

func ipcPath(port int) string { return "/tmp/" + strconv.Itoa(port) }

// ipcFile identifies a socket file created by Bind.
type ipcFile struct {
	path string
	info os.FileInfo
}

// remove deletes the file unless another process has replaced it since
// (libzmq's bind unlinks and recreates the path).
func (f *ipcFile) remove() {
	if fi, err := os.Stat(f.path); err == nil && os.SameFile(fi, f.info) {
		_ = os.Remove(f.path)
	}
}

// ipcInUse reports whether a process accepts connections on the unix socket
// at path. A stale file left by a dead process does not count.
func ipcInUse(path string) bool {
	c, err := net.DialTimeout("unix", path, 100*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func isIPv6(host string) bool { return strings.Contains(host, ":") }

func tcpEndpoint(host, port string) string {
	if isIPv6(host) {
		host = "[" + host + "]"
	}
	return "tcp://" + host + ":" + port
}

// endpoint is the address Connect dials for a peer.
func (t *Transport) endpoint(node message.Node) (string, error) {
	if node.Port <= 0 || node.Port == message.Empty || node.Port > 65535 {
		return "", fmt.Errorf("van/zmq: connect to %s: invalid port", node)
	}
	if t.cfg.Local {
		return "ipc://" + ipcPath(int(node.Port)), nil
	}
	if node.Hostname == "" {
		return "", fmt.Errorf("van/zmq: connect to %s: empty hostname", node)
	}
	return tcpEndpoint(node.Hostname, strconv.Itoa(int(node.Port))), nil
}

// Connect implements van.Transport. The DEALER's identity is "ps<myID>"
// (with a token, Identity's), or none when myID is message.Empty. The connection is established in the
// background (libzmq also reconnects by itself after a drop): Send queues
// messages until it is up. Connecting to the node's own address is allowed
// (ps-lite nodes send TERMINATE to themselves).
//
// A previous DEALER for node.ID with another address or identity is closed
// once the new one is installed (and once a Send blocked on it, if any,
// returns); messages already queued on it get up to one second to flush and
// are not ordered with respect to messages sent on the new connection. A previous DEALER with the same address and identity
// is kept as it is: a second connection under the same identity would make
// the receiving ROUTER misattribute or drop the first one's messages.
func (t *Transport) Connect(node message.Node, myID int32) error {
	if node.ID == message.Empty {
		return fmt.Errorf("van/zmq: connect to %s: node has no id", node)
	}
	endpoint, err := t.endpoint(node)
	if err != nil {
		return err
	}
	ident := ""
	if myID != message.Empty {
		ident = Identity(t.cfg.AuthKey, myID)
	}

	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return van.ErrClosed
	}
	if myID != message.Empty {
		t.myID.Store(myID)
	}
	old := t.peers[node.ID]
	if old != nil && old.addr == endpoint && old.ident == ident {
		t.mu.Unlock()
		return nil
	}
	sock, err := t.newDealer(endpoint, ident)
	if err != nil {
		t.mu.Unlock()
		return fmt.Errorf("van/zmq: connect to node %d at %s: %w", node.ID, endpoint, err)
	}
	p := &peer{sock: sock, addr: endpoint, ident: ident}
	if err := t.watchDealer(p, node, myID); err != nil {
		_ = sock.close()
		t.mu.Unlock()
		return fmt.Errorf("van/zmq: connect to node %d at %s: %w", node.ID, endpoint, err)
	}
	t.peers[node.ID] = p
	t.mu.Unlock()

	linger := replacedLinger
	if old != nil && ident == "" && old.ident != "" {
		// The path to a dead node whose address a new process took is
		// retired (an anonymous DEALER replaces it): what is queued is
		// for the dead process, and flushed, or reconnected during the
		// linger, old would reach the new process under this node's
		// identity and take it from this node's own connection there
		// (ZMQ_ROUTER_HANDOVER), silently. Closed at once instead.
		linger = 0
	}
	if old != nil {
		// A Send blocked at old's high-water mark (its peer is dead or
		// stuck, which is often why it is being replaced) holds old.mu
		// until the peer drains or Close: do not make Connect wait for it.
		if old.mu.TryLock() {
			old.close(linger)
			old.mu.Unlock()
		} else {
			go func() {
				old.mu.Lock()
				old.close(linger)
				old.mu.Unlock()
			}()
		}
	}
	t.log.Debug("van/zmq: connected", "node", node.ID, "endpoint", endpoint, "identity", string(idPart([]byte(ident))))
	return nil
}

// newDealer creates and connects a DEALER. Caller holds t.mu (write).
func (t *Transport) newDealer(endpoint, ident string) (*zsocket, error) {
	sock, err := t.newSocket(sockDealer)
	if err != nil {
		return nil, err
	}
	err = func() error {
		if ident != "" {
			if err := sock.setBytes(optIdentity, ident); err != nil {
				return fmt.Errorf("set ZMQ_IDENTITY: %w", err)
			}
		}
		if t.cfg.WaterMark > 0 {
			if err := sock.setInt(optSndHWM, t.cfg.WaterMark); err != nil {
				return fmt.Errorf("set ZMQ_SNDHWM: %w", err)
			}
		}
		if err := t.curveClient(sock); err != nil {
			return err
		}
		if strings.HasPrefix(endpoint, "tcp://[") {
			if err := sock.setInt(optIPv6, 1); err != nil {
				return fmt.Errorf("set ZMQ_IPV6: %w", err)
			}
		}
		return sock.connect(endpoint)
	}()
	if err != nil {
		_ = sock.close()
		return nil, err
	}
	return sock, nil
}

// close closes the peer's socket, letting queued messages flush for up to
// linger. Caller holds p.mu.
func (p *peer) close(linger time.Duration) {
	if p.sock == nil {
		return
	}
	if linger > 0 {
		_ = p.sock.setInt(optLinger, int(linger/time.Millisecond))
	}
	_ = p.sock.close()
	p.sock = nil
	p.out.free()
	if p.fwd != nil {
		p.fwd.close()
		p.fwd = nil
	}
}

// Close implements van.Transport. It closes every socket with LINGER 0
// (unsent messages are dropped) and terminates the context. A Recv or a
// Send blocked on a full peer returns van.ErrClosed. Close returns only
// once libzmq has released everything.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() { t.closeErr = t.close() })
	return t.closeErr
}

func (t *Transport) close() error {
	t.mu.Lock()
	t.closed.Store(true)
	peers := t.peers
	t.peers = nil
	t.mu.Unlock()

	// zmq_ctx_term first makes every blocking call on the context's sockets
	// return ETERM (that is what wakes a Recv blocked on the ROUTER, or a
	// Send blocked on the high-water mark), then waits until every socket
	// is closed. So it runs concurrently, while this goroutine closes each
	// socket once its owner has let go of it: no socket is ever closed
	// while another goroutine is inside a call on it.
	termErr := make(chan error, 1)
	go func() { termErr <- t.ctx.term() }()

	t.recvMu.Lock()
	if t.router != nil {
		_ = t.router.close()
		t.router = nil
		t.in.free()
		t.in = nil
	}
	t.closeDealerIn()
	if t.ipcFile != nil {
		t.ipcFile.remove()
		t.ipcFile = nil
	}
	t.recvMu.Unlock()

	for _, p := range peers {
		p.mu.Lock()
		p.close(0)
		p.mu.Unlock()
	}
	if err := <-termErr; err != nil {
		return fmt.Errorf("van/zmq: terminate context: %w", err)
	}
	// Every message of the context is closed now, so libzmq has released
	// all of this transport's zero-copy frames.
	drainReleases()
	return nil
}
