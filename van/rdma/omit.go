//go:build !rdma || !cgo

package rdma

import (
	"github.com/elasticps/elasticps/message"
)

// Built reports whether this build has the RDMA van (the rdma tag and cgo).
const Built = false

// Transport is a stand-in: this build has no RDMA code (see ErrNotBuilt).
// It exists so that code mentioning rdma.Transport builds everywhere.
type Transport struct{}

// New reports an invalid cfg as the real build would, and otherwise returns
// ErrNotBuilt.
func New(cfg Config) (*Transport, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, ErrNotBuilt
}

// Bind returns ErrNotBuilt.
func (*Transport) Bind(message.Node, int) (int, error) { return 0, ErrNotBuilt }

// Connect returns ErrNotBuilt.
func (*Transport) Connect(message.Node, int32) error { return ErrNotBuilt }

// Send returns ErrNotBuilt.
func (*Transport) Send(*message.Message) (int, error) { return 0, ErrNotBuilt }

// Recv returns ErrNotBuilt.
func (*Transport) Recv() (*message.Message, error) { return nil, ErrNotBuilt }

// Close does nothing.
func (*Transport) Close() error { return nil }

// RegisterBuffer returns ErrNotBuilt.
func (*Transport) RegisterBuffer([]byte) error { return ErrNotBuilt }

// UnregisterBuffer does nothing.
func (*Transport) UnregisterBuffer([]byte) {}
