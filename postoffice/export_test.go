package postoffice

import (
	"time"

	"github.com/elasticps/elasticps/message"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
)

// What the whole-job tests (package postoffice_test, which run jobs with
// internal/jobtest, which imports this package) need of the internals.

// SharedProcs is sharedProcs.
var SharedProcs = sharedProcs

// ShareHostCPUs is shareHostCPUs.
func (p *Postoffice) ShareHostCPUs(me message.Node, nodes []message.Node) { p.shareHostCPUs(me, nodes) }

// GossipMembers is the number of members p's membership gossip knows, -1
// while it has none.
func (p *Postoffice) GossipMembers() int {
	p.memberMu.Lock()
	defer p.memberMu.Unlock()
	if p.member == nil {
		return -1
	}
	return len(p.member.Members())
}

// KillGossip shuts p's gossip member down without leaving, as a node that
// dies abruptly does.
func (p *Postoffice) KillGossip() {
	p.memberMu.Lock()
	defer p.memberMu.Unlock()
	if p.member != nil {
		_ = p.member.Shutdown()
		p.member = nil
	}
}

// SetWaitReport makes nodes report a wait after first, then every max at
// most; the returned function restores the defaults.
func SetWaitReport(first, max time.Duration) (restore func()) {
	f, m := waitReportFirst, waitReportMax
	waitReportFirst, waitReportMax = first, max
	return func() { waitReportFirst, waitReportMax = f, m }
}

// DropReceived makes p drop, before Start, every received message f
// returns true for (on the receive loop), as PS_DROP_MSG does at random.
func (p *Postoffice) DropReceived(f func(*message.Message) bool) { p.dropFilter = f }

// Unacknowledged is the number of messages p sent that its resender keeps
// until acknowledged (0 without PS_RESEND).
func (p *Postoffice) Unacknowledged() int {
	if p.resender == nil {
		return 0
	}
	p.resender.mu.Lock()
	defer p.resender.mu.Unlock()
	return len(p.resender.pending)
}

// ResendFailures is how many messages p's resender gave up on, and how
// many times its shutdown stopped waiting for acknowledgements.
func (p *Postoffice) ResendFailures() (gaveUp, unsettled int64) {
	if p.resender == nil {
		return 0, 0
	}
	return p.resender.gaveUp.Load(), p.resender.unsettled.Load()
}

// AuthRefused is elasticps_auth_refused_total{reason} of p.
func (p *Postoffice) AuthRefused(reason string) int {
	return int(promtestutil.ToFloat64(p.auth.refused.WithLabelValues(reason)))
}
