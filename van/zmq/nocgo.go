//go:build !cgo

package zmq

import (
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// Transport is a stand-in: without cgo there is no libzmq, and New always
// fails with ErrNoCgo. It exists so that code mentioning zmq.Transport still
// builds with CGO_ENABLED=0 and can fall back to another transport.
type Transport struct{}

var _ van.Transport = (*Transport)(nil)

// New reports an invalid cfg as the cgo build would, and otherwise returns
// ErrNoCgo.
func New(cfg Config) (*Transport, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, ErrNoCgo
}

// Bind returns ErrNoCgo.
func (*Transport) Bind(message.Node, int) (int, error) { return 0, ErrNoCgo }

// Connect returns ErrNoCgo.
func (*Transport) Connect(message.Node, int32) error { return ErrNoCgo }

// Send returns ErrNoCgo.
func (*Transport) Send(*message.Message) (int, error) { return 0, ErrNoCgo }

// Recv returns ErrNoCgo.
func (*Transport) Recv() (*message.Message, error) { return nil, ErrNoCgo }

// Close does nothing.
func (*Transport) Close() error { return nil }

// Release does nothing: no message was ever received.
func (*Transport) Release(*message.Message) {}

// Detach does nothing.
func (*Transport) Detach(*message.Message) {}
