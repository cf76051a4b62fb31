package postoffice

import (
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/anyvan"
)

// NewTransport creates the transport that cfg.VanType names (ps-lite's
// Van::Create) with anyvan.Open: "zmq" (the default; wire-compatible with
// C++ ps-lite), "tcp" (pure Go, faster, for jobs whose nodes are all
// elasticps), "shm" (shared memory, nodes on one host), "ibverbs" / "fabric" (van/rdma, in builds with -tags rdma;
// the BytePS fork's RDMA tunables come from cfg.Env), or "mem"
// (in-process jobs only).
func NewTransport(cfg Config) (van.Transport, error) {
	host := cfg.NodeHost
	if cfg.Role == message.RoleScheduler {
		host = cfg.SchedulerHost
	}
	var key []byte // the vans bind announced ids to it (auth.go)
	if cfg.AuthToken != "" {
		key = []byte(cfg.AuthToken)
	}
	return anyvan.OpenEnv(cfg.VanType, cfg.Env, van.Options{Local: cfg.Local, WaterMark: cfg.WaterMark, BindAll: cfg.BindAll,
		Host: host, KeepMalloc: cfg.KeepMalloc, Limits: cfg.Limits.Limits, Wire: cfg.Wire, Logger: cfg.logger(), Encryption: cfg.Encryption, AuthKey: key})
}

// vanName is what the node's logs call the van cfg selects: "samehost"
// where PS_SHM_AUTO / BYTEPS_ENABLE_IPC turned tcp into it.
func vanName(cfg Config) string {
	if kind, err := anyvan.Kind(cfg.VanType, cfg.LookupEnv); err == nil {
		return kind
	}
	return cfg.VanType
}

// Open creates a node with the transport cfg selects.
func Open(cfg Config) (*Postoffice, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tr, err := NewTransport(cfg)
	if err != nil {
		return nil, err
	}
	p, err := New(cfg, tr)
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return p, nil
}

// countingTransport counts, in stats, every message that passes through
// the node's transport, whoever sends it (Send, the resender, Stop), meta
// and payload bytes alike, as the node's metrics promise.
type countingTransport struct {
	van.Transport
	stats *Stats
	wire  message.Wire
}

// Send implements van.Transport; the transports return meta + payload
// bytes.
func (c countingTransport) Send(m *message.Message) (int, error) {
	n, err := c.Transport.Send(m)
	if err == nil {
		c.stats.MsgsSent.Add(1)
		c.stats.BytesSent.Add(int64(n))
	}
	return n, err
}

// Recv implements van.Transport. The meta's size is its encoding's, as
// the sender's transport counted it.
func (c countingTransport) Recv() (*message.Message, error) {
	m, err := c.Transport.Recv()
	if err == nil {
		c.stats.MsgsRecv.Add(1)
		c.stats.BytesRecv.Add(int64(c.wire.EncodedLen(&m.Meta) + messageBytes(m)))
	}
	return m, err
}

var _ van.Transport = countingTransport{}
