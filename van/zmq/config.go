// Package zmq implements van.Transport over ZeroMQ (libzmq via
// github.com/pebbe/zmq4), wire-compatible with the ZMQ van of C++ ps-lite
// (dmlc generation).
//
// Topology, as in ps-lite: each Transport owns one ZeroMQ context, one ROUTER
// socket bound at the node's own address (Bind) on which every message is
// received, and one DEALER socket per peer id (Connect) on which messages to
// that peer are sent. A request and its response therefore travel on two
// different TCP connections. The DEALER announces the identity "ps<id>" once
// the node knows its id; the receiving ROUTER turns that identity back into
// Meta.Sender.
//
// Framing: a message is one ZeroMQ multipart message whose frame 0 is the
// protobuf-encoded Meta (message.EncodeMeta) and whose frames 1..n are the
// raw data frames. Empty frames are legal and preserved (a pull request
// carries an empty vals frame).
//
// Building without cgo: the package still compiles, but New returns
// ErrNoCgo, so that pure-Go builds of the rest of the tree keep working.
package zmq

import (
	"errors"
	"log/slog"

	"github.com/elasticps/elasticps/van"
)

// Config configures a Transport. The zero value is usable: TCP on the node's
// hostname, libzmq's default high-water mark, van.DefaultLimits, and
// slog.Default for logging.
type Config struct {
	// Local selects IPC endpoints ipc:///tmp/<port> instead of
	// tcp://host:port, for bind and connect alike (ps-lite's DMLC_LOCAL=1).
	// All nodes of a job must agree on it. Default false.
	Local bool

	// WaterMark is ZMQ_SNDHWM, in messages, applied to every DEALER created
	// by Connect (ps-lite's DMLC_PS_WATER_MARK). When a peer falls this far
	// behind, Send blocks until it catches up. 0 keeps libzmq's default
	// (1000); negative values are rejected.
	WaterMark int

	// BindAll makes Bind listen on 0.0.0.0 whatever the node's hostname
	// (ps-lite's DMLC_USE_KUBERNETES for the scheduler, whose advertised
	// name is a service address that is not a local interface). Default
	// false.
	BindAll bool

	// Limits bounds what Recv accepts; zero fields take the value of
	// van.DefaultLimits (16 data frames, 2 GiB per message). MaxMessageBytes
	// is also given to libzmq as ZMQ_MAXMSGSIZE, so a single larger frame
	// makes libzmq drop the offending connection before it is buffered.
	Limits van.Limits

	// Logger receives debug logs of binds and connects. Default
	// slog.Default().
	Logger *slog.Logger
}

// ErrNoCgo is returned by New in builds without cgo, where libzmq cannot be
// called.
var ErrNoCgo = errors.New("van/zmq: built without cgo; the ZeroMQ transport needs cgo and libzmq")

// withDefaults returns cfg with every zero field replaced by its default,
// or an error for values that cannot be honoured.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.WaterMark < 0 {
		return cfg, errors.New("van/zmq: Config.WaterMark must not be negative")
	}
	if cfg.Limits.MaxFrames < 0 || cfg.Limits.MaxMessageBytes < 0 {
		return cfg, errors.New("van/zmq: Config.Limits must not be negative")
	}
	def := van.DefaultLimits()
	if cfg.Limits.MaxFrames == 0 {
		cfg.Limits.MaxFrames = def.MaxFrames
	}
	if cfg.Limits.MaxMessageBytes == 0 {
		cfg.Limits.MaxMessageBytes = def.MaxMessageBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}
