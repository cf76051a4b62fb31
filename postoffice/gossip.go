package postoffice

import (
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
		NodeName:     me.Role.String() + "-" + addrOf(me),
		ClusterLabel: fmt.Sprintf("elasticps/%s:%d", p.cfg.SchedulerHost, p.cfg.SchedulerPort),
		Logger:       p.log,
		Meta:         meta,
		Local:        isLoopback(me.Hostname),
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
	} else {
		cfg.BindAddr = host
		cfg.Seeds = []string{net.JoinHostPort(p.cfg.SchedulerHost, strconv.Itoa(p.cfg.GossipPort))}
	}
	m, err := membership.Start(cfg)
	if err != nil {
		return fmt.Errorf("postoffice: membership gossip (PS_GOSSIP_PORT=%d): %w", p.cfg.GossipPort, err)
	}
	p.member = m
	p.vlog(1, "membership gossip started", "addr", m.Addr())
	return nil
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
