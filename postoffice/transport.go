package postoffice

import (
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/anyvan"
)

// NewTransport creates the transport that cfg.VanType names (ps-lite's
// Van::Create) with anyvan.Open: "zmq" (the default; wire-compatible with
// C++ ps-lite), "tcp" (pure Go, faster, for jobs whose nodes are all
// elasticps), "ibverbs" / "fabric" (van/rdma, in builds with -tags rdma;
// the BytePS fork's RDMA tunables come from the environment), or "mem"
// (in-process jobs only).
func NewTransport(cfg Config) (van.Transport, error) {
	host := cfg.NodeHost
	if cfg.Role == message.RoleScheduler {
		host = cfg.SchedulerHost
	}
	return anyvan.Open(cfg.VanType, van.Options{Local: cfg.Local, WaterMark: cfg.WaterMark, BindAll: cfg.BindAll,
		Host: host, KeepMalloc: cfg.KeepMalloc, Logger: cfg.logger()})
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
