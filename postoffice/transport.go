package postoffice

import (
	"fmt"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/rdma"
	"github.com/elasticps/elasticps/van/tcp"
	"github.com/elasticps/elasticps/van/zmq"
)

// NewTransport creates the transport that cfg.VanType names
// (ps-lite's Van::Create): "zmq" (the default; wire-compatible with C++
// ps-lite), "tcp" (pure Go, faster, for jobs whose nodes are all
// elasticps), or "ibverbs" / "fabric" (van/rdma, in builds with -tags rdma).
func NewTransport(cfg Config) (van.Transport, error) {
	switch cfg.VanType {
	case "", "zmq":
		return zmq.New(zmq.Config{Local: cfg.Local, WaterMark: cfg.WaterMark, BindAll: cfg.BindAll, KeepMalloc: cfg.KeepMalloc, Logger: cfg.logger()})
	case "tcp":
		return tcp.New(tcp.Config{Local: cfg.Local, WaterMark: cfg.WaterMark, BindAll: cfg.BindAll, Logger: cfg.logger()})
	case "ibverbs", "fabric":
		return newRDMA(cfg)
	}
	return nil, fmt.Errorf("postoffice: unknown van type %q (DMLC_PS_VAN_TYPE): use zmq, tcp, ibverbs or fabric", cfg.VanType)
}

// newRDMA opens van/rdma with the BytePS fork's RDMA tunables from the
// environment (BYTEPS_RDMA_*, FI_PROVIDER, DMLC_INTERFACE). Without the
// rdma build tag it returns rdma.ErrNotBuilt.
func newRDMA(cfg Config) (van.Transport, error) {
	rc, err := rdma.ConfigFromEnv(rdma.Backend(cfg.VanType), OSEnv)
	if err != nil {
		return nil, err
	}
	rc.Host = cfg.NodeHost
	if cfg.Role == message.RoleScheduler {
		rc.Host = cfg.SchedulerHost
	}
	rc.BindAll = cfg.BindAll
	rc.Logger = cfg.logger()
	t, err := rdma.New(rc)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return t, nil
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
