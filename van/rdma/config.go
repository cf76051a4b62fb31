// Package rdma implements van.Transport over RDMA: ps-lite's (BytePS fork)
// one-sided RDMA van protocol, written once in Go over a small set of RDMA
// operations (register memory, connect, post a send, post a gathered write
// with immediate data, poll completions) that two thin cgo backends provide:
//
//   - ibverbs: libibverbs + librdmacm, RC queue pairs set up by rdma_cm with
//     the node id in the connection's private data (DMLC_ENABLE_RDMA=ibverbs
//     or 1, or DMLC_PS_VAN_TYPE=ibverbs);
//   - fabric: libfabric FI_EP_RDM endpoints with FI_RMA and remote CQ data
//     (fi_writemsg with FI_REMOTE_CQ_DATA), bootstrapped by a small TCP side
//     channel on the node's port (DMLC_ENABLE_RDMA=fabric). FI_PROVIDER or
//     Config.Provider picks the provider; "tcp;ofi_rxm" runs on any host.
//
// # Protocol
//
// Every message is one "image" (a fixed header, the frame lengths, the
// protobuf meta of message.EncodeMeta, then the frames) written with ONE
// gathered RDMA write-with-immediate straight into a registered buffer of
// the receiver (a slot); the immediate is the slot's index in the
// receiver's address pool, so the write is also the notification.
//
// Where the receiver's slot comes from:
//
//   - Rendezvous (any message; always for control, SimpleApp and multi-key
//     messages, as ps-lite's older ibverbs van does): the sender posts a
//     START control message with the image size, the receiver allocates a
//     slot and answers REPLY with its index, address and remote key.
//   - Cached (KV requests with one key): a START may ask the receiver to bind
//     the slot to (key, push/pull) of that link. After the receiver has
//     copied a request out, the slot is handed back to the sender for the
//     next request of the same key inside the response's header, so a steady
//     stream of one-key requests needs no rendezvous and no extra message.
//     The sender keeps up to Config.CachedSlotsPerKey such slots per key and
//     falls back to a rendezvous when all are busy, so several outstanding
//     requests for one key are safe (BytePS assumes one).
//   - Landing (responses to KV requests with one key): the request carries a
//     slot of the requester sized by the previous response for that key; the
//     responder writes the response there directly. A pull response so lands
//     in the worker's registered buffer with no rendezvous.
//
// Messages of one link are numbered; the receiver delivers them in that
// order whatever order their writes complete in, so Send is FIFO per peer
// pair as van.Transport requires.
//
// # Buffers
//
// Receive slots and send staging come from a pool of registered memory
// (size classes, reused, never registered per message). Send copies frames
// into staging, so the caller may reuse them once Send returns, except for
// frames inside buffers registered with Transport.RegisterBuffer: those are
// written zero-copy from the caller's memory (a registered-memory cache keyed
// by buffer, as BytePS's mem_mr_) and Send returns once the write completed.
// Recv copies each message out of its slot into one Go allocation owned by
// the caller (frames 8-byte aligned), after which the slot is reused.
//
// # Building
//
// The implementation needs the build tag rdma, cgo, and the development
// packages of libibverbs, librdmacm and libfabric. Without them New returns
// ErrNotBuilt, so default builds of the rest of the tree need none of them.
package rdma

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/elasticps/elasticps/van"
)

// Backend selects the RDMA library under the van.
type Backend string

// Backends.
const (
	// Verbs is libibverbs + librdmacm (InfiniBand, RoCE, iWARP).
	Verbs Backend = "ibverbs"
	// Fabric is libfabric (EFA, verbs;ofi_rxm, tcp;ofi_rxm, ...).
	Fabric Backend = "fabric"
)

// ErrNotBuilt is returned by New in builds without the rdma tag (or without
// cgo), which contain no RDMA code at all.
var ErrNotBuilt = errors.New("van/rdma: built without the rdma tag: rebuild with -tags rdma and libibverbs-dev, librdmacm-dev, libfabric-dev installed")

// ErrNoDevice is returned by New for the ibverbs backend on a host without
// any RDMA device.
var ErrNoDevice = errors.New("van/rdma: no RDMA device found (ibv_get_device_list returned 0 devices); use DMLC_ENABLE_RDMA=fabric or zmq")

// Error is a failed call into libfabric, libibverbs or librdmacm.
type Error struct {
	Call string // the library call that failed, e.g. "fi_getinfo"
	Code int    // its error code (a positive errno or FI_E* value)
	Msg  string // the library's text for Code
}

func (e *Error) Error() string {
	return fmt.Sprintf("van/rdma: %s failed: %s (%d)", e.Call, e.Msg, e.Code)
}

// Config configures a Transport. Only Backend is required; every other zero
// field takes the default documented on it.
//
// Of the shared van.Options: Host is the local address the device is
// opened on (the fabric endpoint binds it, and the ibverbs backend picks the
// RDMA device behind it); BindAll and Limits as everywhere, where senders
// ask for at most Limits.MaxMessageBytes of the receiver's memory; Logger
// receives the device choice (Info) and connection events (Debug). Local,
// WaterMark and KeepMalloc are unused.
type Config struct {
	van.Options

	// Backend is Verbs or Fabric.
	Backend Backend

	// Provider is the libfabric provider (Fabric only), e.g. "tcp;ofi_rxm",
	// "efa" or "verbs;ofi_rxm". Empty leaves the choice to libfabric, which
	// honours the FI_PROVIDER environment variable and otherwise takes the
	// first provider that serves the node's address.
	Provider string

	// Interface is the network interface (DMLC_INTERFACE) whose RDMA device
	// the ibverbs backend should use; empty means the interface that owns
	// the node's address. Only used to pick and log the device.
	Interface string

	// SendDepth is the number of writes one link may have in flight
	// (BYTEPS_RDMA_START_DEPTH). A Send beyond it waits for a completion.
	// More overlaps more transfers; each costs a send queue entry. Default 128.
	SendDepth int

	// RxDepth is the number of control receive buffers (BYTEPS_RDMA_RX_DEPTH):
	// per endpoint for Fabric, per queue pair for Verbs, where write-with-
	// immediate notifications consume them too. Default 512 (Fabric) or
	// 256 (Verbs).
	RxDepth int

	// AddressPoolSize is the number of receive slots that may exist at once
	// (BYTEPS_ADDRESS_POOL_SIZE); a slot index is the immediate data of a
	// write, so this bounds messages in flight towards this node. Default 10240.
	AddressPoolSize int

	// MaxRecvMemory bounds the registered memory held by receive slots, in
	// bytes. A rendezvous that would exceed it waits until Recv frees a slot
	// (back-pressure). Cached slots may use at most half of it. Default 4 GiB.
	MaxRecvMemory int64

	// CachedSlotsPerKey is how many receiver slots a sender keeps per
	// (key, push/pull, peer) for the rendezvous-free path. 1 is BytePS's
	// behaviour; 2 lets a request be written while the previous response is
	// still on its way. Default 2.
	CachedSlotsPerKey int

	// ConnectTimeout bounds how long a Send waits for the connection that
	// Connect started (the peer may not be listening yet). Default 60s.
	ConnectTimeout time.Duration
}

// withDefaults returns cfg with every zero field replaced by its default,
// or an error for values that cannot be honoured.
func (cfg Config) withDefaults() (Config, error) {
	switch cfg.Backend {
	case Verbs, Fabric:
	case "":
		return cfg, errors.New("van/rdma: Config.Backend is empty: use rdma.Verbs or rdma.Fabric")
	default:
		return cfg, fmt.Errorf("van/rdma: unknown backend %q: use %q or %q", cfg.Backend, Verbs, Fabric)
	}
	if cfg.SendDepth < 0 || cfg.RxDepth < 0 || cfg.AddressPoolSize < 0 || cfg.MaxRecvMemory < 0 ||
		cfg.CachedSlotsPerKey < 0 || cfg.ConnectTimeout < 0 {
		return cfg, errors.New("van/rdma: Config fields must not be negative")
	}
	var err error
	if cfg.Options, err = cfg.Options.WithDefaults("van/rdma"); err != nil {
		return cfg, err
	}
	if cfg.SendDepth == 0 {
		cfg.SendDepth = 128
	}
	if cfg.RxDepth == 0 {
		cfg.RxDepth = 512
		if cfg.Backend == Verbs {
			cfg.RxDepth = 256
		}
	}
	if cfg.AddressPoolSize == 0 {
		cfg.AddressPoolSize = 10240
	}
	if cfg.MaxRecvMemory == 0 {
		cfg.MaxRecvMemory = 4 << 30
	}
	if cfg.CachedSlotsPerKey == 0 {
		cfg.CachedSlotsPerKey = 2
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 60 * time.Second
	}
	return cfg, nil
}

// ParseBackend maps the values of DMLC_ENABLE_RDMA and DMLC_PS_VAN_TYPE to
// a backend: "ibverbs" and "1" (BytePS's deprecated alias) give Verbs,
// "fabric" gives Fabric; "", "0" and "zmq" give ok == false (no RDMA).
func ParseBackend(s string) (b Backend, ok bool, err error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "0", "zmq":
		return "", false, nil
	case "ibverbs", "1":
		return Verbs, true, nil
	case "fabric":
		return Fabric, true, nil
	}
	return "", false, fmt.Errorf("van/rdma: unknown RDMA van %q: use ibverbs (or 1), fabric, or zmq (or 0)", s)
}

// ConfigFromEnv returns the Config for backend b with the tunables ps-lite's
// BytePS fork reads from the environment: BYTEPS_RDMA_START_DEPTH
// (SendDepth), BYTEPS_RDMA_RX_DEPTH (RxDepth), BYTEPS_ADDRESS_POOL_SIZE,
// PS_RDMA_MAX_RECV_MB (MaxRecvMemory, MiB), FI_PROVIDER (Provider) and
// DMLC_INTERFACE (Interface). getenv is os.LookupEnv or a stand-in.
func ConfigFromEnv(b Backend, getenv func(string) (string, bool)) (Config, error) {
	cfg := Config{Backend: b}
	get := func(k string) string { v, _ := getenv(k); return strings.TrimSpace(v) }
	ints := []struct {
		key string
		dst *int
	}{
		{"BYTEPS_RDMA_START_DEPTH", &cfg.SendDepth},
		{"BYTEPS_RDMA_RX_DEPTH", &cfg.RxDepth},
		{"BYTEPS_ADDRESS_POOL_SIZE", &cfg.AddressPoolSize},
	}
	for _, f := range ints {
		if v := get(f.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return cfg, fmt.Errorf("van/rdma: %s=%q is invalid: expected an integer >= 1", f.key, v)
			}
			*f.dst = n
		}
	}
	if v := get("PS_RDMA_MAX_RECV_MB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("van/rdma: PS_RDMA_MAX_RECV_MB=%q is invalid: expected MiB >= 1", v)
		}
		cfg.MaxRecvMemory = n << 20
	}
	cfg.Provider = get("FI_PROVIDER")
	cfg.Interface = get("DMLC_INTERFACE")
	return cfg, nil
}
