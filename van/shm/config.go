package shm

import (
	"fmt"
	"strconv"
	"strings"
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

	// RingBytes is the size of each connection's data area, the part of
	// its shared segment for large frames. Pages are committed as they
	// are first written, and each message goes to the lowest offset where
	// it fits, so a connection uses about as much as the messages its
	// receiver holds at once. Default 64 MiB.
	RingBytes int

	// InlineMax: messages whose data frames total fewer bytes are copied
	// into the message stream with their header (for a few KB, two copies
	// cost less than a region of the data area and its release note).
	// Default 32 KiB.
	InlineMax int

	// StreamBytes is the size of each connection's message stream, the
	// ring in the segment that carries every message's header and meta,
	// and small messages' frames; rounded up to a power of two, at least
	// 4 KiB. Default 1 MiB.
	StreamBytes int

	// Spin is how long a receiver polls a stream that ran dry before it
	// sleeps on the socket until the sender rings (PS_SHM_SPIN_US): a
	// reply that comes within it costs no system call on either side.
	// Default 100 µs; negative: never poll.
	Spin time.Duration

	// HandshakeTimeout bounds how long an accepted connection may take to
	// send its hello. Default 10 s.
	HandshakeTimeout time.Duration
}

// SpinEnv is the environment variable ConfigFromEnv reads Spin from.
const SpinEnv = "PS_SHM_SPIN_US"

// ConfigFromEnv returns the Config with the tunables of the environment:
// PS_SHM_SPIN_US (Spin, µs; 0: never poll). getenv is os.LookupEnv or a
// stand-in.
func ConfigFromEnv(getenv func(string) (string, bool)) (Config, error) {
	var cfg Config
	if v, ok := getenv(SpinEnv); ok && strings.TrimSpace(v) != "" {
		us, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || us < 0 || us > 1e6 {
			return cfg, fmt.Errorf("van/shm: %s=%q is invalid: expected microseconds from 0 (never poll) to 1000000", SpinEnv, v)
		}
		cfg.Spin = time.Duration(us) * time.Microsecond
		if us == 0 {
			cfg.Spin = -1
		}
	}
	return cfg, nil
}
