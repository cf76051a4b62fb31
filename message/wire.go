package message

import (
	"errors"
	"fmt"
	"strings"
)

// WireEnv is the environment variable that selects a job's Wire. Every node
// of a job must set it alike.
const WireEnv = "PS_WIRE"

// Wire is a meta encoding: which generation of C++ ps-lite a job's nodes
// speak. The transports that carry ps-lite's wire (van/zmq) encode and
// decode every meta frame with the Wire they were given.
type Wire uint8

const (
	// WireDmlc is dmlc ps-lite's protobuf PBMeta (dmlc.go), as MXNet's
	// ps-lite sends it; the default.
	WireDmlc Wire = iota
	// WireBytedance is the BytePS fork's raw RawMeta struct (rawmeta.go).
	WireBytedance
)

func (w Wire) String() string {
	switch w {
	case WireDmlc:
		return "dmlc"
	case WireBytedance:
		return "bytedance"
	}
	return fmt.Sprintf("wire(%d)", uint8(w))
}

// ParseWire maps PS_WIRE's values to a Wire: "dmlc" (or empty) and
// "bytedance" (or its alias "byteps"), in any case.
func ParseWire(s string) (Wire, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "dmlc":
		return WireDmlc, nil
	case "bytedance", "byteps":
		return WireBytedance, nil
	}
	return WireDmlc, fmt.Errorf("unknown %s %q: expected dmlc (dmlc ps-lite, MXNet; the default) or bytedance (the BytePS fork)", WireEnv, s)
}

// EncodedLen returns the number of bytes Append appends for m.
func (w Wire) EncodedLen(m *Meta) int {
	if w == WireBytedance {
		return m.RawEncodedLen()
	}
	return m.EncodedLen()
}

// Append appends m's encoding on wire w to dst (see Meta.MarshalTo and
// Meta.AppendRaw). It allocates only if dst lacks capacity for EncodedLen
// bytes. Only the bytedance wire can fail (on what its structs cannot hold).
func (w Wire) Append(dst []byte, m *Meta) ([]byte, error) {
	if w == WireBytedance {
		return m.AppendRaw(dst)
	}
	return m.MarshalTo(dst), nil
}

// Encode returns m's encoding on wire w in a new slice.
func (w Wire) Encode(m *Meta) ([]byte, error) {
	return w.Append(make([]byte, 0, w.EncodedLen(m)), m)
}

// Decode decodes a meta frame of wire w into m (see DecodeMeta and
// DecodeRawMeta). When the frame is malformed for w but is a valid frame of
// the other wire, the error is a *WireMismatchError (wrapping the decode
// error), so that a node set up for another wire than its peers says what
// to change instead of reporting garbage.
func (w Wire) Decode(b []byte, m *Meta) error {
	err := w.decode(b, m)
	if err == nil {
		return nil
	}
	other := WireDmlc
	if w == WireDmlc {
		other = WireBytedance
	}
	if other.decode(b, m) == nil {
		return &WireMismatchError{Local: w, Peer: other, Err: err}
	}
	return err
}

func (w Wire) decode(b []byte, m *Meta) error {
	if w == WireBytedance {
		return DecodeRawMeta(b, m)
	}
	return DecodeMeta(b, m)
}

// WireMismatchError reports a meta frame in another wire format than this
// node's: the job's nodes disagree on PS_WIRE.
type WireMismatchError struct {
	Local Wire  // this node's wire
	Peer  Wire  // the wire the frame decodes as
	Err   error // why it is not a frame of Local
}

func (e *WireMismatchError) Error() string {
	return fmt.Sprintf("message: the peer sent a %s-wire meta but this node speaks %s (%s): set the same %s on every node of the job (unset means dmlc)",
		e.Peer, e.Local, wireEnvValue(e.Local), WireEnv)
}

func (e *WireMismatchError) Unwrap() error { return e.Err }

// wireEnvValue says how a node comes to use w.
func wireEnvValue(w Wire) string {
	if w == WireDmlc {
		return WireEnv + " unset or dmlc"
	}
	return WireEnv + "=" + w.String()
}

// IsWireMismatch reports whether err is or wraps a *WireMismatchError.
func IsWireMismatch(err error) bool {
	var we *WireMismatchError
	return errors.As(err, &we)
}
