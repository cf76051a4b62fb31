package postoffice

import (
	"fmt"

	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/zmq"
)

// NewTransport creates the transport that cfg.VanType names
// (ps-lite's Van::Create).
func NewTransport(cfg Config) (van.Transport, error) {
	switch cfg.VanType {
	case "", "zmq":
		return zmq.New(zmq.Config{Local: cfg.Local, WaterMark: cfg.WaterMark, BindAll: cfg.BindAll, Logger: cfg.logger()})
	}
	return nil, fmt.Errorf("postoffice: unknown van type %q (DMLC_PS_VAN_TYPE): use zmq", cfg.VanType)
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
