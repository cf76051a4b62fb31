package membership

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// MetaMaxSize is the largest Meta memberlist carries (its MetaMaxSize).
const MetaMaxSize = memberlist.MetaMaxSize

// Config configures one member. Start it from DefaultConfig and set at
// least NodeName; the zero value of a timing field keeps the profile
// default (LAN, or loopback when Local is set).
type Config struct {
	// NodeName identifies the member and must be unique in the cluster for
	// the life of the cluster: memberlist refuses a known name from a new
	// address until the old one has left. Use something that changes when
	// a process restarts, e.g. "server-9-10.0.0.2:9001": role, the ps
	// node's id (a restarted server gets a new one) and its address.
	// Required.
	NodeName string
	// BindAddr is the IP to listen on for gossip (UDP and TCP, same port).
	// Default "0.0.0.0". With 0.0.0.0 or :: memberlist advertises the first
	// private IP of the host; set AdvertiseAddr where that is wrong.
	BindAddr string
	// BindPort is the gossip port; 0 (the default) picks a free one, which
	// Addr reports. The scheduler, which others join through, needs a
	// known port.
	BindPort int
	// AdvertiseAddr is the IP other members reach this one at; "" derives
	// it from BindAddr as described there.
	AdvertiseAddr string
	// Seeds are host:port gossip addresses of existing members (e.g. the
	// scheduler's) to join through. Start fails, naming them, when none
	// can be reached. Empty starts a new cluster (the scheduler).
	Seeds []string
	// ClusterLabel, when set, is put on every gossip packet and stream;
	// members with another label ignore them. Set it to a job id so that
	// two jobs on shared hosts never merge by a stray port. Default "".
	ClusterLabel string
	// Logger receives memberlist's own log lines, mapped from its [DEBUG],
	// [INFO], [WARN] and [ERR] prefixes to slog levels; nil means
	// slog.Default().
	Logger *slog.Logger
	// Events, if set, is called for every membership change (the first is
	// this member's own Join). Calls come one at a time, in order, from a
	// goroutine of this package (not memberlist's, which holds its node
	// lock during notifications), so Events may call Members; it must not
	// call Leave or Shutdown, and should return quickly, since later
	// events wait for it. Ownership of the Event passes to the callee.
	Events func(Event)
	// Meta is opaque data gossiped with this member, at most MetaMaxSize
	// (512) bytes: e.g. EncodeMeta of the ps node id and role. SetMeta
	// changes it later.
	Meta []byte
	// Local selects memberlist's DefaultLocalConfig (loopback: 1 s TCP
	// timeout, 200 ms probe timeout, suspicion multiplier 3) instead of
	// DefaultLANConfig (10 s, 500 ms, 4). Use it for tests and one-host
	// jobs.
	Local bool
	// ProbeInterval is how often a member probes a random other member
	// (default 1 s in both profiles; FastProbeInterval in elasticps jobs).
	// Failure detection takes up to one interval until a member probes the
	// dead one, one more for the failed probe (its indirect probes wait
	// until the interval ends), then SuspicionMult * ProbeInterval *
	// max(1, log10(members)), and up to SuspicionMaxTimeoutMult (6) times
	// that suspicion while fewer than SuspicionMult-2 other members confirm
	// it. Lower it for faster detection at the cost of more probe traffic
	// (one UDP round trip per member per interval).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for an ack before asking
	// others to probe indirectly; keep it above the network's 99th
	// percentile RTT (default 500 ms LAN, 200 ms Local).
	ProbeTimeout time.Duration
	// SuspicionMult scales how long a suspected member has to refute the
	// suspicion before it is declared failed (default 4 LAN, 3 Local).
	// Lower detects faster but declares a paused process (GC, swap) dead
	// more often.
	SuspicionMult int
	// Lifelines makes this member accept a TCP connection from every member
	// that joins through it and probe a member whose connection breaks at
	// once (see Suspect): a killed process is then reported failed within
	// two probe intervals instead of memberlist's probe and suspicion.
	// Set it on the seed (the scheduler). Every member holds a lifeline to
	// each member that accepts them, whatever this setting.
	Lifelines bool

	// suspected, if set (tests), is called once each Suspect is decided.
	suspected func(name string, failed bool)
}

// Fast failure detection: the timings elasticps jobs use (postoffice's
// PS_GOSSIP_PROBE_INTERVAL, PS_GOSSIP_PROBE_TIMEOUT and
// PS_GOSSIP_SUSPICION_MULT defaults). A member killed on a LAN or loopback
// is found through its lifeline (Config.Lifelines) in about
// lifelineConfirm probe intervals, 0.4 s. Memberlist's probes alone, for
// a dead host or a cut network, take about 1 s: the first probe of it comes
// within a FastProbeInterval, fails after one more (the indirect probes and
// the TCP fallback get the whole interval), and the suspicion runs
// FastSuspicionMult intervals once a third member confirms it (up to 6
// times that while none does; memberlist scales it by log10 of the size
// from 10 members on). A member that is paused (GC, a signal, an overloaded
// host) for less than about three intervals is only suspected: once it runs
// again it hears the suspicion and refutes it. A multiplier of 2 would make
// memberlist expect no confirmation (it wants SuspicionMult-2 of them): a
// single member's failed probe would decide, and one member that stalls
// for half a second would declare others dead, which happens on hosts
// shared by many jobs.
const (
	FastProbeInterval = 200 * time.Millisecond
	FastProbeTimeout  = 100 * time.Millisecond
	FastSuspicionMult = 3
)

// DefaultConfig returns a Config with every default filled in, bound to
// 0.0.0.0 on a free port with the LAN timings. NodeName is left empty
// because no default is unique: set it.
func DefaultConfig() Config {
	return Config{
		BindAddr: "0.0.0.0",
		BindPort: 0,
	}
}

// ErrShutdown is returned by operations on a member that was shut down.
var ErrShutdown = errors.New("membership: member is shut down")

// validate checks cfg and returns the memberlist configuration it implies.
func (cfg Config) validate() (*memberlist.Config, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("membership: Config.NodeName is empty: set a name unique in the cluster, e.g. \"server-<node id>-<host>:<ps port>\" (postoffice uses role, id and address)")
	}
	if len(cfg.Meta) > MetaMaxSize {
		return nil, fmt.Errorf("membership: Config.Meta is %d bytes, more than memberlist's limit of %d", len(cfg.Meta), MetaMaxSize)
	}
	if cfg.BindPort < 0 || cfg.BindPort > 65535 {
		return nil, fmt.Errorf("membership: Config.BindPort %d is out of range 0-65535", cfg.BindPort)
	}
	bind := cfg.BindAddr
	if bind == "" {
		bind = "0.0.0.0"
	}
	if net.ParseIP(bind) == nil {
		return nil, fmt.Errorf("membership: Config.BindAddr %q is not an IP address", cfg.BindAddr)
	}
	if cfg.AdvertiseAddr != "" && net.ParseIP(cfg.AdvertiseAddr) == nil {
		return nil, fmt.Errorf("membership: Config.AdvertiseAddr %q is not an IP address", cfg.AdvertiseAddr)
	}
	for _, s := range cfg.Seeds {
		// memberlist would quietly use our own port for a seed without
		// one; a typo there should fail here, clearly, instead.
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			return nil, fmt.Errorf("membership: seed %q is not host:port", s)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("membership: seed %q: port must be 1-65535", s)
		}
	}
	if cfg.ProbeInterval < 0 || cfg.ProbeTimeout < 0 || cfg.SuspicionMult < 0 {
		return nil, errors.New("membership: ProbeInterval, ProbeTimeout and SuspicionMult must not be negative")
	}

	var mc *memberlist.Config
	if cfg.Local {
		mc = memberlist.DefaultLocalConfig()
	} else {
		mc = memberlist.DefaultLANConfig()
	}
	mc.Name = cfg.NodeName
	// A dead member's name may be taken at once by a new process at
	// another address (a server taking its old id back after a restart);
	// memberlist's default, never, would keep the new process out.
	mc.DeadNodeReclaimTime = time.Millisecond
	mc.BindAddr = bind
	mc.BindPort = cfg.BindPort
	// memberlist advertises AdvertisePort; with BindPort 0 it fills in the
	// port it got, otherwise the two must agree.
	mc.AdvertisePort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.Label = cfg.ClusterLabel
	if cfg.ProbeInterval > 0 {
		mc.ProbeInterval = cfg.ProbeInterval
	}
	if cfg.ProbeTimeout > 0 {
		mc.ProbeTimeout = cfg.ProbeTimeout
	}
	if mc.ProbeTimeout >= mc.ProbeInterval {
		return nil, fmt.Errorf("membership: ProbeTimeout %v must be shorter than ProbeInterval %v", mc.ProbeTimeout, mc.ProbeInterval)
	}
	if cfg.SuspicionMult > 0 {
		mc.SuspicionMult = cfg.SuspicionMult
	}
	return mc, nil
}
