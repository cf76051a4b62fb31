package postoffice

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/van"
)

// Limits are the node's explicit bounds on what a peer can make it accept
// or hold (issue 23): the transport's van.Limits, the parked messages per
// peer (Config.CustomerWait), and the scheduler's job size. The defaults
// never bite a real ps-lite, MXNet or BytePS job; each refusal is counted
// (Postoffice.LimitRefusals, metric elasticps_limit_refusals_total) and
// logged at most once per peer and limit per LogInterval.
type Limits struct {
	van.Limits

	// MaxNodes bounds the servers and workers (standbys included) the
	// scheduler keeps; an ADD_NODE beyond it is refused (PS_MAX_NODES,
	// default DefaultMaxNodes).
	MaxNodes int
}

// DefaultMaxNodes is PS_MAX_NODES when unset.
const DefaultMaxNodes = 16384

// LogInterval is how often at most a refusal of the same kind from the
// same peer is logged; the lines in between are counted and the next line
// says how many were suppressed.
const LogInterval = 10 * time.Second

// ReasonNodes is the refusal reason of PS_MAX_NODES; the others are the
// van.Reason constants.
const ReasonNodes = "max_nodes"

// refusalReasons are the label values of elasticps_limit_refusals_total, in
// the order of Postoffice.refusals.
var refusalReasons = [...]string{van.ReasonMalformed, van.ReasonHello, van.ReasonMeta, van.ReasonFrames,
	van.ReasonSize, van.ReasonPending, van.ReasonRegister, ReasonNodes, van.ReasonEncrypt}

// RefusalReasons is the number of limits elasticps_limit_refusals_total
// has a series for on every node.
const RefusalReasons = len(refusalReasons)

type refusals [len(refusalReasons)]atomic.Int64

func (r *refusals) add(reason string) {
	for i, s := range refusalReasons {
		if s == reason {
			r[i].Add(1)
			return
		}
	}
	r[0].Add(1) // a transport without reasons: malformed
}

// LimitRefusals returns, per reason (van.ReasonMeta, ..., ReasonNodes;
// van.ReasonMalformed for bytes that do not decode), how many messages or
// connections this node refused.
func (p *Postoffice) LimitRefusals() map[string]int64 {
	m := make(map[string]int64, len(refusalReasons))
	for i, s := range refusalReasons {
		m[s] = p.refused[i].Load()
	}
	return m
}

func (p *Postoffice) refusalCount(reason string) func() int64 {
	for i, s := range refusalReasons {
		if s == reason {
			return p.refused[i].Load
		}
	}
	panic("postoffice: unknown refusal reason " + reason)
}

// frameRefused counts and logs, rate-limited, a message the transport
// refused.
func (p *Postoffice) frameRefused(fe *van.FrameError) {
	p.stats.Malformed.Add(1)
	reason := fe.Reason
	if reason == "" {
		reason = van.ReasonMalformed
	}
	p.refused.add(reason)
	level := slog.LevelError
	if reason == van.ReasonRegister {
		level = slog.LevelWarn // also an honest node that waits long for its job; it redials
	}
	p.ratelog.Log(level, fe.Peer, reason, "refused a message; the node keeps serving",
		"err", fe.Err, "malformed_total", p.stats.Malformed.Load())
}

// limitsFromEnv reads PS_MAX_META_BYTES, PS_MAX_FRAMES,
// PS_MAX_MESSAGE_BYTES, PS_MAX_PENDING_BYTES, PS_REGISTER_TIMEOUT and
// PS_MAX_NODES; unset ones take the defaults.
func limitsFromEnv(get func(string) string) (Limits, error) {
	def := van.DefaultLimits()
	l := Limits{Limits: def, MaxNodes: DefaultMaxNodes}
	var err error
	bytes := func(key string, v *int64, want string) {
		if err != nil {
			return
		}
		var n int
		if n, err = optionalInt(get, key, int(*v), 1, want); err == nil {
			*v = int64(n)
		}
	}
	bytes("PS_MAX_META_BYTES", &l.MaxMetaBytes, "bytes >= 1 of a message's meta frame (default 1048576)")
	bytes("PS_MAX_MESSAGE_BYTES", &l.MaxMessageBytes, "bytes >= 1 of a whole message (default 2147483648)")
	bytes("PS_MAX_PENDING_BYTES", &l.MaxPendingBytes, "bytes >= 1 a peer may have waiting at this node (default 4294967296)")
	if err != nil {
		return l, err
	}
	if l.MaxFrames, err = optionalInt(get, "PS_MAX_FRAMES", def.MaxFrames, 1, "data frames >= 1 per message (default 16)"); err != nil {
		return l, err
	}
	if l.MaxNodes, err = optionalInt(get, "PS_MAX_NODES", DefaultMaxNodes, 1, "servers and workers >= 1 the scheduler accepts (default "+strconv.Itoa(DefaultMaxNodes)+")"); err != nil {
		return l, err
	}
	rt, err := optionalInt(get, "PS_REGISTER_TIMEOUT", int(def.RegisterTimeout/time.Second), 1, "seconds >= 1 a connection may stay anonymous (default 60)")
	if err != nil {
		return l, err
	}
	l.RegisterTimeout = time.Duration(rt) * time.Second
	return l, nil
}

// withDefaults fills zero fields with the defaults and refuses negative
// ones.
func (l *Limits) withDefaults() error {
	o, err := van.Options{Limits: l.Limits}.WithDefaults("postoffice")
	if err != nil {
		return err
	}
	l.Limits = o.Limits
	if l.MaxNodes < 0 {
		return errors.New("postoffice: Limits.MaxNodes must not be negative")
	}
	if l.MaxNodes == 0 {
		l.MaxNodes = DefaultMaxNodes
	}
	return nil
}

// errTooManyNodes is the scheduler's refusal of an ADD_NODE past MaxNodes.
func errTooManyNodes(have, limit int) error {
	return fmt.Errorf("ADD_NODE refused: the job has %d nodes, the limit is %d (PS_MAX_NODES)", have, limit)
}
