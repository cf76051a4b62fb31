package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// StatsSource gives a node's monotonically increasing message counters. It
// is an interface so that this package does not import postoffice; see
// StatsFuncs for a one-literal adapter.
type StatsSource interface {
	SentMessages() int64
	ReceivedMessages() int64
	SentBytes() int64
	ReceivedBytes() int64
	// MalformedMessages counts messages the transport rejected.
	MalformedMessages() int64
	// DroppedMessages counts valid messages that had nowhere to go.
	DroppedMessages() int64
	// RejectedRequests counts control messages the node refused.
	RejectedRequests() int64
	// ReceiveHandOvers counts the times a handler held the receive loop
	// so long that receiving went on in a new goroutine.
	ReceiveHandOvers() int64
	// ReleasedTwice counts received messages released twice (a bug in a
	// consumer; see van.ReleasedTwice).
	ReleasedTwice() int64
}

// StatsFuncs adapts loose functions to StatsSource, so that atomics can be
// exposed with method values and no new type, e.g. for postoffice.Stats:
//
//	st := po.Stats()
//	metrics.StatsFuncs{MsgsSent: st.MsgsSent.Load, MsgsRecv: st.MsgsRecv.Load, ...}
//
// A nil function reads as 0.
type StatsFuncs struct {
	MsgsSent, MsgsRecv   func() int64
	BytesSent, BytesRecv func() int64
	Malformed            func() int64
	Dropped              func() int64
	Rejected             func() int64
	HandOvers            func() int64
	Twice                func() int64
}

var _ StatsSource = StatsFuncs{}

func call(f func() int64) int64 {
	if f == nil {
		return 0
	}
	return f()
}

// SentMessages implements StatsSource.
func (s StatsFuncs) SentMessages() int64 { return call(s.MsgsSent) }

// ReceivedMessages implements StatsSource.
func (s StatsFuncs) ReceivedMessages() int64 { return call(s.MsgsRecv) }

// SentBytes implements StatsSource.
func (s StatsFuncs) SentBytes() int64 { return call(s.BytesSent) }

// ReceivedBytes implements StatsSource.
func (s StatsFuncs) ReceivedBytes() int64 { return call(s.BytesRecv) }

// MalformedMessages implements StatsSource.
func (s StatsFuncs) MalformedMessages() int64 { return call(s.Malformed) }

// DroppedMessages implements StatsSource.
func (s StatsFuncs) DroppedMessages() int64 { return call(s.Dropped) }

// RejectedRequests implements StatsSource.
func (s StatsFuncs) RejectedRequests() int64 { return call(s.Rejected) }

// ReceiveHandOvers implements StatsSource.
func (s StatsFuncs) ReceiveHandOvers() int64 { return call(s.HandOvers) }

// ReleasedTwice implements StatsSource.
func (s StatsFuncs) ReleasedTwice() int64 { return call(s.Twice) }

// Names of the node metrics registered by NodeMetrics; each has one label,
// role.
const (
	MetricMessagesSent      = "elasticps_messages_sent_total"
	MetricMessagesReceived  = "elasticps_messages_received_total"
	MetricBytesSent         = "elasticps_bytes_sent_total"
	MetricBytesReceived     = "elasticps_bytes_received_total"
	MetricMalformedMessages = "elasticps_malformed_messages_total"
	MetricDroppedMessages   = "elasticps_dropped_messages_total"
	MetricRejectedRequests  = "elasticps_rejected_requests_total"
	MetricReceiveHandOvers  = "elasticps_receive_handovers_total"
	MetricReleasedTwice     = "elasticps_messages_released_twice_total"
	MetricLimitRefusals     = "elasticps_limit_refusals_total"
)

// LimitRefusals registers MetricLimitRefusals{role, limit}: one counter per
// value of limits, read at scrape time from count(limit), which counts the
// messages and connections the node refused for that limit.
func LimitRefusals(r *Registry, role string, limits []string, count func(limit string) func() int64) error {
	var errs []error
	for _, l := range limits {
		read := count(l)
		err := r.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: MetricLimitRefusals, Help: "Messages and connections the node refused by a limit (PS_MAX_*), or as malformed; it kept serving.",
			ConstLabels: prometheus.Labels{"role": role, "limit": l},
		}, func() float64 { return float64(read()) }))
		if err != nil {
			errs = append(errs, fmt.Errorf("metrics: %s{role=%q,limit=%q}: %w", MetricLimitRefusals, role, l, err))
		}
	}
	return errors.Join(errs...)
}

// NodeMetrics registers the standard node counters, labelled
// role="scheduler"|"server"|"worker", read from stats at scrape time (the
// node already counts them atomically; counting again would cost the hot
// path twice). One registry holds one node per role: a second node of the
// same role gets a prometheus.AlreadyRegisteredError, and a process hosting
// several should give each its own Registry or pass a StatsSource that sums
// them. Every counter is attempted; the errors are joined.
func NodeMetrics(r *Registry, role string, stats StatsSource) error {
	if stats == nil {
		return errors.New("metrics: NodeMetrics: nil StatsSource")
	}
	counter := func(name, help string, read func() int64) error {
		err := r.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: name, Help: help, ConstLabels: prometheus.Labels{"role": role},
		}, func() float64 { return float64(read()) }))
		if err != nil {
			return fmt.Errorf("metrics: %s{role=%q}: %w", name, role, err)
		}
		return nil
	}
	return errors.Join(
		counter(MetricMessagesSent, "Messages sent by the node, data and control.", stats.SentMessages),
		counter(MetricMessagesReceived, "Messages received by the node, data and control.", stats.ReceivedMessages),
		counter(MetricBytesSent, "Bytes sent by the node (meta and payload).", stats.SentBytes),
		counter(MetricBytesReceived, "Bytes received by the node (meta and payload).", stats.ReceivedBytes),
		counter(MetricMalformedMessages, "Messages the transport rejected as malformed; the node kept serving.", stats.MalformedMessages),
		counter(MetricDroppedMessages, "Valid messages dropped because nothing was there to take them.", stats.DroppedMessages),
		counter(MetricRejectedRequests, "Control messages the node refused as invalid; it kept serving.", stats.RejectedRequests),
		counter(MetricReceiveHandOvers, "Times a message handler ran on the receive goroutine so long that receiving went on in a new goroutine.", stats.ReceiveHandOvers),
		counter(MetricReleasedTwice, "Received messages released twice, in the whole process (a bug in a consumer: the second release was refused); 0 in a correct program.", stats.ReleasedTwice),
	)
}
