package shm

import (
	"time"

	"github.com/elasticps/elasticps/van"
)

// Config configures a Transport. The zero value is usable.
//
// Of the shared van.Options: WaterMark bounds the queue of a peer that is
// not connected (yet, or again after a drop), as in van/tcp. Local,
// BindAll, Host and KeepMalloc are unused (every connection is local).
type Config struct {
	van.Options

	// RingBytes is the size of each connection's shared segment. Pages
	// are committed as they are first written, and the segment is filled
	// from its start whenever it is empty, so an idle or ping-pong
	// connection uses about one message's worth. Default 64 MiB.
	RingBytes int

	// InlineMax: messages whose data frames total fewer bytes go through
	// the socket (two kernel copies of a few KB cost less than a release
	// note). Default 32 KiB.
	InlineMax int

	// HandshakeTimeout bounds how long an accepted connection may take to
	// send its hello. Default 10 s.
	HandshakeTimeout time.Duration
}
