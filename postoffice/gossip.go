package postoffice

import (
	"cmp"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/elasticps/elasticps/membership"
	"github.com/elasticps/elasticps/message"
)

// startGossip joins the scheduler and servers' membership (hashicorp
// memberlist) when GossipPort is set: the scheduler listens there, servers
// join it. Once per node.
func (p *Postoffice) startGossip(me message.Node) error {
	if p.cfg.GossipPort <= 0 {
		return nil
	}
	p.memberMu.Lock()
	defer p.memberMu.Unlock()
	if p.member != nil {
		return nil
	}
	meta, err := membership.EncodeMeta(membership.NodeMeta{ID: me.ID, Role: me.Role.String(), Addr: addrOf(me)})
	if err != nil {
		return err
	}
	cfg := membership.Config{
		// The id makes each life of a node a name of its own: a server
		// restarted at its old address joins as a standby under a new id,
		// and the old name, still held by the dead process's entry, would
		// refuse it ("conflicting address": its gossip port differs).
		NodeName:     fmt.Sprintf("%s-%d-%s", me.Role, me.ID, addrOf(me)),
		ClusterLabel: fmt.Sprintf("elasticps/%s:%d", p.cfg.SchedulerHost, p.cfg.SchedulerPort),
		Logger:       p.log,
		Meta:         meta,
		Local:        isLoopback(me.Hostname),
		// Fast unless set: the heartbeat timeout must not be what declares
		// a death (seconds), memberlist should.
		ProbeInterval: cmp.Or(p.cfg.GossipProbeInterval, membership.FastProbeInterval),
		ProbeTimeout:  cmp.Or(p.cfg.GossipProbeTimeout, membership.FastProbeTimeout),
		SuspicionMult: cmp.Or(p.cfg.GossipSuspicionMult, membership.FastSuspicionMult),
	}
	host := me.Hostname
	if ips, err := net.LookupIP(host); err == nil && len(ips) > 0 {
		host = ips[0].String()
	}
	if p.cfg.Role == message.RoleScheduler {
		cfg.BindAddr, cfg.BindPort = host, p.cfg.GossipPort
		if p.cfg.BindAll {
			cfg.BindAddr, cfg.AdvertiseAddr = "0.0.0.0", host
		}
		cfg.Events = p.onMembership
		// A server killed closes its lifeline at once: probed then, it is
		// known dead in a few probe timeouts.
		cfg.Lifelines = true
	} else {
		cfg.BindAddr = host
		cfg.Seeds = p.gossipSeeds()
	}
	m, err := membership.Start(cfg)
	if err != nil {
		return fmt.Errorf("postoffice: membership gossip (PS_GOSSIP_PORT=%d): %w", p.cfg.GossipPort, err)
	}
	p.member = m
	p.vlog(1, "membership gossip started", "addr", m.Addr())
	return nil
}

// gossipSeeds is the scheduler's gossip address, which servers join.
func (p *Postoffice) gossipSeeds() []string {
	return []string{net.JoinHostPort(p.cfg.SchedulerHost, strconv.Itoa(p.cfg.GossipPort))}
}

// rejoinGossip joins, on a server whose scheduler is back, the scheduler's
// membership again: a restarted scheduler's memberlist starts empty, and
// would find this server's death by heartbeats only. (A scheduler that was
// only unreachable knows the server: the join is a push/pull with it.)
func (p *Postoffice) rejoinGossip() {
	p.memberMu.Lock()
	m := p.member
	p.memberMu.Unlock()
	if m == nil || p.cfg.Role != message.RoleServer {
		return
	}
	go func() {
		if _, err := m.Join(p.gossipSeeds()); err != nil && !p.isStopped() {
			p.log.Warn("membership gossip not joined again after the scheduler came back: its failures are detected by heartbeats only", "err", err)
			return
		} else if err != nil {
			return
		}
		p.vlog(1, "membership gossip joined again", "seeds", p.gossipSeeds())
	}()
}

// stopGossip leaves the membership: for the others a clean stop is a
// Leave, not a failure.
func (p *Postoffice) stopGossip() {
	p.memberMu.Lock()
	defer p.memberMu.Unlock()
	if m := p.member; m != nil {
		_ = m.Leave(time.Second)
		_ = m.Shutdown()
		p.member = nil
	}
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// gossipFromEnv reads memberlist's failure-detection timings into c. It
// checks them on every node, so that a typo stops the job at once.
func gossipFromEnv(get func(string) string, c *Config) error {
	const ms = time.Millisecond
	interval, err := optionalInt(get, "PS_GOSSIP_PROBE_INTERVAL", int(membership.FastProbeInterval/ms), 2,
		fmt.Sprintf("milliseconds >= 2 between a member's probes (default %d)", membership.FastProbeInterval/ms))
	if err != nil {
		return err
	}
	// Unset, the timeout follows a shorter interval down.
	timeout, err := optionalInt(get, "PS_GOSSIP_PROBE_TIMEOUT", min(int(membership.FastProbeTimeout/ms), interval/2), 1,
		fmt.Sprintf("milliseconds >= 1 a probe waits for its answer, less than PS_GOSSIP_PROBE_INTERVAL (default %d, or half the interval if that is less)", membership.FastProbeTimeout/ms))
	if err != nil {
		return err
	}
	if timeout >= interval {
		return &EnvError{Var: "PS_GOSSIP_PROBE_TIMEOUT", Value: get("PS_GOSSIP_PROBE_TIMEOUT"),
			Want: fmt.Sprintf("fewer milliseconds than PS_GOSSIP_PROBE_INTERVAL=%d (a probe ends within its interval)", interval)}
	}
	mult, err := optionalInt(get, "PS_GOSSIP_SUSPICION_MULT", membership.FastSuspicionMult, 1,
		fmt.Sprintf("an integer >= 1: probe intervals a suspected member has to refute the suspicion (default %d)", membership.FastSuspicionMult))
	if err != nil {
		return err
	}
	c.GossipProbeInterval = time.Duration(interval) * ms
	c.GossipProbeTimeout = time.Duration(timeout) * ms
	c.GossipSuspicionMult = mult
	return nil
}
