package postoffice

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elasticps/elasticps/internal/logfmt"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/syncctl"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/rdma"
)

// Config is everything a node needs to join a job. ConfigFromEnv fills it
// from ps-lite's environment variables; Go programs may also build it
// directly (tests run whole jobs inside one process this way).
type Config struct {
	// Env is where ConfigFromEnv read the configuration (ps-lite's
	// Environment::Init map, then the C environment, for bridge nodes);
	// NewTransport reads the vans' own variables (BYTEPS_ENABLE_IPC,
	// PS_SHM_SPIN_US, BYTEPS_RDMA_*) from it too. nil: the process
	// environment.
	Env Getenv
	// AuthToken is the job's shared secret (PS_AUTH_TOKEN, or the first
	// line of PS_AUTH_TOKEN_FILE). Set, every peer must prove it holds it
	// (docs/security.md); empty, the job is open, as ps-lite's.
	AuthToken string
	// Encryption encrypts every connection (PS_ENCRYPT=on; van/zmq CURVE,
	// van/tcp TLS), with keys derived from AuthToken or read from key
	// files (encrypt.go, docs/security.md); nil (the default) is plaintext.
	Encryption *van.Encryption
	// Role of this node (DMLC_ROLE). Required.
	Role message.Role
	// NumWorkers and NumServers are the expected counts (DMLC_NUM_WORKER,
	// DMLC_NUM_SERVER). NumWorkers counts worker *registrations*: a process
	// with two customers that both call Start registers twice.
	NumWorkers, NumServers int
	// GroupSize is the number of instances each server and worker process
	// runs (DMLC_GROUP_SIZE, the BytePS fork's instance groups; 0 or 1:
	// one). NumWorkers and NumServers then count processes: the job has
	// GroupSize times as many nodes, instance i of every process talking
	// to instance i of the others. Every instance needs a WantRank, and
	// every node of the job (the scheduler too) the same GroupSize.
	GroupSize int
	// Instance is which instance of its process this node is, 0 to
	// GroupSize-1. It asks for rank (WantRank-1)*GroupSize+Instance, serves
	// or uses the key ranges of the servers' instance Instance, and binds
	// Port+Instance when Port is set.
	Instance int
	// WantRank is one more than the rank of this process it asks the
	// scheduler for (DMLC_RANK; the BytePS fork's StartPS(…, rank, …)); 0
	// asks for none (message.WantRankOf converts). The scheduler refuses a
	// rank another node has or beyond NumServers/NumWorkers.
	WantRank int
	// SchedulerHost and SchedulerPort locate the scheduler
	// (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT). The scheduler binds exactly there.
	SchedulerHost string
	SchedulerPort int
	// NodeHost is the address this node advertises and binds
	// (DMLC_NODE_HOST; else the first IPv4 of DMLC_INTERFACE; else of the
	// first non-loopback interface, falling back to 127.0.0.1).
	NodeHost string
	// Port to listen on (PORT); 0 picks a free one.
	Port int
	// VanType selects the transport (DMLC_PS_VAN_TYPE): "zmq" (default,
	// ps-lite's wire), "tcp" (pure Go, faster; every node must be
	// elasticps), "shm" (shared memory; every node elasticps and on one
	// host), "ibverbs" or "fabric" (also DMLC_ENABLE_RDMA; see van/rdma).
	VanType string
	// Wire is the meta encoding (PS_WIRE): message.WireDmlc (unset or
	// "dmlc": dmlc ps-lite's protobuf, as MXNet speaks it) or
	// message.WireBytedance ("bytedance": the BytePS fork's raw struct, so
	// that the fork's C++ nodes can join). Every node of a job must use the
	// same; only the zmq van offers the bytedance wire.
	Wire message.Wire
	// Local uses ipc:// endpoints instead of tcp (DMLC_LOCAL).
	Local bool
	// BindAll makes the scheduler bind 0.0.0.0 (DMLC_USE_KUBERNETES).
	BindAll bool
	// WaterMark is ZMQ_SNDHWM for peer sockets (DMLC_PS_WATER_MARK); 0 = default.
	WaterMark int
	// KeepMalloc leaves glibc malloc's thresholds alone, which the ZeroMQ
	// van otherwise raises for the process (PS_ZMQ_TUNE_MALLOC=0; see
	// zmq.Config.KeepMalloc).
	KeepMalloc bool
	// Verbose is the log level (PS_VERBOSE): 1 logs connections, 2 every message.
	Verbose int
	// HeartbeatInterval between node->scheduler heartbeats
	// (PS_HEARTBEAT_INTERVAL, seconds); 0 disables heartbeats.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout after which a silent node counts as dead
	// (PS_HEARTBEAT_TIMEOUT, seconds); 0 = never dead. Recovery of a
	// restarted node needs both heartbeat settings.
	HeartbeatTimeout time.Duration
	// SchedulerWait is how long a server or worker that lost the scheduler
	// waits for it to come back (restarted) before its barriers fail
	// (PS_SCHEDULER_WAIT, seconds); 0: 30 heartbeat timeouts.
	SchedulerWait time.Duration
	// Resend enables the ACK/resend layer (PS_RESEND) with ResendTimeout
	// (PS_RESEND_TIMEOUT, ms, default 1000).
	Resend        bool
	ResendTimeout time.Duration
	// DropPercent drops that share of received messages (PS_DROP_MSG; debug).
	DropPercent int
	// Elastic enables live reassignment of keys between servers (PS_ELASTIC):
	// routing tables change while the job runs, and every node must be
	// elasticps (C++ ps-lite nodes would abort on the elastic messages).
	Elastic bool
	// Replicas is the number of backups of every key interval (PS_REPLICAS,
	// default 0: ps-lite's behaviour, no copies). It needs PS_ELASTIC=1 (the
	// coordinator's routing table records the backups) and fewer backups
	// than servers. See docs/fault-tolerance.md.
	Replicas int
	// GossipPort is the scheduler's membership (hashicorp/memberlist) port
	// (PS_GOSSIP_PORT; default DMLC_PS_ROOT_PORT+2 in elastic jobs, else 0 =
	// off). The scheduler and the servers gossip, so a server that dies is
	// known dead within seconds, without heartbeats.
	GossipPort int
	// GossipProbeInterval, GossipProbeTimeout and GossipSuspicionMult tune
	// memberlist's failure detection (PS_GOSSIP_PROBE_INTERVAL and
	// PS_GOSSIP_PROBE_TIMEOUT in ms, PS_GOSSIP_SUSPICION_MULT); zero keeps
	// membership's Fast timings (200 ms, 100 ms, 3: with the scheduler's
	// lifelines a killed server is known dead in about 0.4 s, by the
	// probes alone in about 1 s). See docs/fault-tolerance.md.
	GossipProbeInterval time.Duration
	GossipProbeTimeout  time.Duration
	GossipSuspicionMult int
	// MetricsAddr serves Prometheus metrics at http://MetricsAddr/metrics
	// (PS_METRICS_ADDR, e.g. 127.0.0.1:9100 or :0); empty = not served.
	MetricsAddr string
	// Standby makes a server join an already running elastic job to take
	// load (PS_STANDBY, scale-out). It has no key range of its own until the
	// scheduler moves keys to it.
	Standby bool
	// CustomerWait is how long a data message for a customer that is not
	// registered yet is parked before it is dropped with an error (5 s, as
	// ps-lite's GetCustomer timeout).
	CustomerWait time.Duration
	// Limits bound what peers can make this node accept or hold
	// (PS_MAX_META_BYTES, PS_MAX_FRAMES, PS_MAX_MESSAGE_BYTES,
	// PS_MAX_PENDING_BYTES, PS_REGISTER_TIMEOUT, PS_MAX_NODES; limits.go).
	// Zero fields take the defaults.
	Limits Limits
	// InlineHandOver is how long a customer's handler may run on the
	// receive goroutine (see InlineCustomer) before the receive loop goes
	// on in a new goroutine (PS_INLINE_HANDOVER_US, microseconds); 0 means
	// DefaultInlineHandOver (20 ms), and a negative value turns inline
	// handling off: every message then goes through its customer's queue
	// and goroutine, as in ps-lite.
	InlineHandOver time.Duration
	// ShareHostCPUs lets the node lower the Go runtime's GOMAXPROCS when
	// other nodes of its job run on the same host (see cpushare.go), unless
	// the GOMAXPROCS environment variable is set. It changes a process-wide
	// setting, so only a process that runs this one node should set it (the
	// elasticps command does; the C++ bridge does for servers, and undoes
	// it with RestoreHostCPUs); default false.
	ShareHostCPUs bool
	// SnapshotDir is where a server writes a snapshot of its store every
	// SnapshotInterval and resumes from at start (PS_SNAPSHOT_DIR; empty =
	// off). SnapshotInterval is PS_SNAPSHOT_INTERVAL, in seconds (default
	// DefaultSnapshotInterval). See docs/fault-tolerance.md.
	SnapshotDir      string
	SnapshotInterval time.Duration
	// Sync is how this node's KV servers synchronize workers (PS_SYNC_MODE
	// and its parameters); the zero value is ASP, ps-lite's behaviour.
	Sync SyncConfig
	// Logger receives the node's logs; nil means slog.Default().
	Logger *slog.Logger
}

// SyncConfig selects a server's synchronization model (package syncctl).
// A Config built in Go takes these values as given; ConfigFromEnv fills in
// the defaults listed with each field.
type SyncConfig struct {
	// Mode (PS_SYNC_MODE: asp, bsp, ssp or fluent; default asp).
	Mode syncctl.Mode
	// Staleness is s, SSP's bound and FluentPS's pause threshold, in
	// iterations >= 0 (PS_STALENESS; default DefaultStaleness).
	Staleness int64
	// PauseProb is FluentPS's constant pause probability in [0, 1], used
	// unless Sigmoid (PS_PAUSE_PROB=a number).
	PauseProb float64
	// Sigmoid makes FluentPS's pause probability 1/(1+e^(s-gap))
	// (PS_PAUSE_PROB=sigmoid, the default).
	Sigmoid bool
	// Seed seeds FluentPS's pause draws (PS_SYNC_SEED; default 0). Each
	// server draws from PCG(Seed, its node id), so a job's draws are
	// reproducible and no two servers draw the same sequence.
	Seed int64
}

// DefaultSnapshotInterval is PS_SNAPSHOT_INTERVAL when unset.
const DefaultSnapshotInterval = 60 * time.Second

// DefaultStaleness is PS_STALENESS when unset: a bound of 3 iterations,
// SSP's usual setting, lets a straggler fall a few iterations behind
// without holding anyone.
const DefaultStaleness = 3

// validate checks the parameters whatever the mode (a bad value is a
// mistake even where this mode ignores it).
func (s SyncConfig) validate() error {
	switch {
	case s.Mode > syncctl.Fluent:
		return fmt.Errorf("postoffice: sync mode %v: use syncctl.ASP, BSP, SSP or Fluent", s.Mode)
	case s.Staleness < 0:
		return fmt.Errorf("postoffice: sync staleness %d: need an integer >= 0 (PS_STALENESS)", s.Staleness)
	case !(s.PauseProb >= 0 && s.PauseProb <= 1): // NaN too
		return fmt.Errorf("postoffice: pause probability %v: need a number in [0, 1] or Sigmoid (PS_PAUSE_PROB)", s.PauseProb)
	}
	return nil
}

// EnvError is returned for a missing or invalid environment variable.
type EnvError struct {
	Var, Value, Want string
}

func (e *EnvError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("environment variable %s is not set: set it to %s", e.Var, e.Want)
	}
	return fmt.Sprintf("environment variable %s=%q is invalid: expected %s", e.Var, e.Value, e.Want)
}

// Getenv looks a variable up; ps-lite's Environment::Init map takes
// precedence over the process environment, which callers model by passing
// their own function.
type Getenv func(key string) (string, bool)

// OSEnv reads the process environment.
func OSEnv(key string) (string, bool) { return os.LookupEnv(key) }

// LookupEnv looks key up where the node's configuration came from
// (Config.Env; the process environment when it is nil).
func (c Config) LookupEnv(key string) (string, bool) {
	if c.Env == nil {
		return OSEnv(key)
	}
	return c.Env(key)
}

// ConfigFromEnv builds a Config from ps-lite's environment variables. The
// first missing or invalid required variable yields an *EnvError.
func ConfigFromEnv(env Getenv) (Config, error) {
	if env == nil {
		env = OSEnv
	}
	c := Config{Env: env}
	get := trimmed(env)

	roleStr := get("DMLC_ROLE")
	if roleStr == "" {
		return c, &EnvError{Var: "DMLC_ROLE", Want: "worker, server or scheduler"}
	}
	role, err := message.ParseRole(roleStr)
	if err != nil {
		return c, &EnvError{Var: "DMLC_ROLE", Value: roleStr, Want: "worker, server or scheduler"}
	}
	c.Role = role
	if c.NumWorkers, err = requiredInt(get, "DMLC_NUM_WORKER", 0, "the number of workers, an integer >= 0"); err != nil {
		return c, err
	}
	if c.NumServers, err = requiredInt(get, "DMLC_NUM_SERVER", 0, "the number of servers, an integer >= 0"); err != nil {
		return c, err
	}
	if c.NumWorkers+c.NumServers == 0 {
		return c, &EnvError{Var: "DMLC_NUM_WORKER", Value: "0", Want: "at least one worker or server (DMLC_NUM_WORKER + DMLC_NUM_SERVER >= 1)"}
	}
	if c.GroupSize, err = optionalInt(get, "DMLC_GROUP_SIZE", 1, 1, "the number of instances per server and worker process, an integer >= 1 (default 1)"); err != nil {
		return c, err
	}
	if c.Role != message.RoleScheduler {
		rank, err := optionalInt(get, "DMLC_RANK", -1, -1, "the rank this process asks for, an integer >= 0 (-1 or unset: the scheduler picks one)")
		if err != nil {
			return c, err
		}
		c.WantRank = int(message.WantRankOf(rank))
	}
	c.SchedulerHost = get("DMLC_PS_ROOT_URI")
	if c.SchedulerHost == "" {
		return c, &EnvError{Var: "DMLC_PS_ROOT_URI", Want: "the scheduler's IP address or host name, e.g. 127.0.0.1"}
	}
	// A host name becomes its address: ZeroMQ binds only addresses (and
	// takes a name for a network interface), and every node must connect
	// to the address the scheduler bound.
	if c.SchedulerHost, err = resolveHost(c.SchedulerHost); err != nil {
		return c, &EnvError{Var: "DMLC_PS_ROOT_URI", Value: get("DMLC_PS_ROOT_URI"), Want: "the scheduler's IP address or a host name that resolves (" + err.Error() + ")"}
	}
	if c.SchedulerPort, err = requiredInt(get, "DMLC_PS_ROOT_PORT", 1, "the scheduler's TCP port, 1-65535"); err != nil {
		return c, err
	}
	if c.SchedulerPort > 65535 {
		return c, &EnvError{Var: "DMLC_PS_ROOT_PORT", Value: get("DMLC_PS_ROOT_PORT"), Want: "the scheduler's TCP port, 1-65535"}
	}

	if c.Port, err = optionalInt(get, "PORT", 0, 0, "a TCP port 0-65535 (0 = any free port)"); err != nil {
		return c, err
	}
	if c.Port > 65535 {
		return c, &EnvError{Var: "PORT", Value: get("PORT"), Want: "a TCP port 0-65535 (0 = any free port)"}
	}
	if c.Role != message.RoleScheduler {
		if c.NodeHost, err = nodeHost(get("DMLC_NODE_HOST"), get("DMLC_INTERFACE")); err != nil {
			return c, err
		}
	}
	c.VanType = get("DMLC_PS_VAN_TYPE")
	if c.VanType == "" {
		c.VanType = "zmq"
	}
	// DMLC_ENABLE_RDMA is the BytePS fork's switch (ibverbs or its alias 1,
	// fabric; 0 or zmq for none); when it names an RDMA van it wins over
	// DMLC_PS_VAN_TYPE, as in that fork.
	if v := get("DMLC_ENABLE_RDMA"); v != "" {
		b, on, err := rdma.ParseBackend(v)
		if err != nil {
			return c, &EnvError{Var: "DMLC_ENABLE_RDMA", Value: v, Want: "ibverbs (or 1), fabric, or zmq (or 0)"}
		}
		if on {
			c.VanType = string(b)
		}
	}
	switch c.VanType {
	case "zmq", "tcp", "shm", "ibverbs", "fabric":
	default:
		return c, &EnvError{Var: "DMLC_PS_VAN_TYPE", Value: c.VanType, Want: `"zmq", "tcp" (all nodes elasticps), "shm" (all nodes elasticps, on one host), "ibverbs" or "fabric"`}
	}
	if c.Wire, err = message.ParseWire(get(message.WireEnv)); err != nil {
		return c, &EnvError{Var: message.WireEnv, Value: get(message.WireEnv), Want: "dmlc (dmlc ps-lite, MXNet; the default) or bytedance (the BytePS fork)"}
	}
	if c.Wire != message.WireDmlc && c.VanType != "zmq" {
		return c, &EnvError{Var: message.WireEnv, Value: get(message.WireEnv),
			Want: "dmlc with DMLC_PS_VAN_TYPE=" + c.VanType + " (the bytedance wire needs DMLC_PS_VAN_TYPE=zmq)"}
	}
	local, err := optionalInt(get, "DMLC_LOCAL", 0, 0, "0 or 1")
	if err != nil {
		return c, err
	}
	c.Local = local != 0
	k8s, err := optionalInt(get, "DMLC_USE_KUBERNETES", 0, 0, "0 or 1")
	if err != nil {
		return c, err
	}
	c.BindAll = k8s > 0 && c.Role == message.RoleScheduler
	if c.WaterMark, err = optionalInt(get, "DMLC_PS_WATER_MARK", 0, 0, "a message count >= 0"); err != nil {
		return c, err
	}
	tune, err := optionalInt(get, "PS_ZMQ_TUNE_MALLOC", 1, 0, "0 or 1")
	if err != nil {
		return c, err
	}
	c.KeepMalloc = tune == 0
	if c.Verbose, err = optionalInt(get, "PS_VERBOSE", 0, 0, "0, 1 or 2"); err != nil {
		return c, err
	}
	hbi, err := optionalInt(get, "PS_HEARTBEAT_INTERVAL", 0, 0, "seconds >= 0 (0 = off)")
	if err != nil {
		return c, err
	}
	c.HeartbeatInterval = time.Duration(hbi) * time.Second
	hbt, err := optionalInt(get, "PS_HEARTBEAT_TIMEOUT", 0, 0, "seconds >= 0 (0 = never dead)")
	if err != nil {
		return c, err
	}
	c.HeartbeatTimeout = time.Duration(hbt) * time.Second
	sw, err := optionalInt(get, "PS_SCHEDULER_WAIT", 0, 0, "seconds >= 0 a node waits for a lost scheduler to come back (0 = 30 heartbeat timeouts)")
	if err != nil {
		return c, err
	}
	c.SchedulerWait = time.Duration(sw) * time.Second
	inl, err := optionalInt(get, "PS_INLINE_HANDOVER_US", 0, -1, "microseconds >= 1 a handler may hold the receive loop, 0 for the default (20000), or -1 to run every handler on its customer's goroutine")
	if err != nil {
		return c, err
	}
	c.InlineHandOver = time.Duration(inl) * time.Microsecond
	resend, err := optionalInt(get, "PS_RESEND", 0, 0, "0 or 1")
	if err != nil {
		return c, err
	}
	c.Resend = resend != 0
	rt, err := optionalInt(get, "PS_RESEND_TIMEOUT", 1000, 1, "milliseconds >= 1")
	if err != nil {
		return c, err
	}
	c.ResendTimeout = time.Duration(rt) * time.Millisecond
	if c.DropPercent, err = optionalInt(get, "PS_DROP_MSG", 0, 0, "a percentage 0-100"); err != nil {
		return c, err
	}
	elastic, err := optionalInt(get, "PS_ELASTIC", 0, 0, "0 or 1")
	if err != nil {
		return c, err
	}
	c.Elastic = elastic != 0
	if c.AuthToken, err = authToken(get); err != nil {
		return c, err
	}
	if c.Encryption, err = encryptionFromEnv(get, c.AuthToken, c.VanType); err != nil {
		return c, err
	}
	c.MetricsAddr = get("PS_METRICS_ADDR")
	gossipDefault := 0
	if c.Elastic {
		gossipDefault = c.SchedulerPort + 2
	}
	if c.GossipPort, err = optionalInt(get, "PS_GOSSIP_PORT", gossipDefault, 0, "the scheduler's gossip port, 1-65535 (0 = no membership gossip)"); err != nil {
		return c, err
	}
	if err := gossipFromEnv(get, &c); err != nil {
		return c, err
	}
	standby, err := optionalInt(get, "PS_STANDBY", 0, 0, "0 or 1")
	if err != nil {
		return c, err
	}
	c.Standby = standby != 0
	if c.Replicas, err = optionalInt(get, "PS_REPLICAS", 0, 0, "the number of backups per key interval, 0 or more"); err != nil {
		return c, err
	}
	if c.Replicas > 0 && !c.Elastic {
		return c, &EnvError{Var: "PS_REPLICAS", Value: strconv.Itoa(c.Replicas), Want: "0, or set PS_ELASTIC=1 too (the backups are recorded in elastic mode's routing table)"}
	}
	if c.Replicas > 0 && c.GossipPort == 0 && (c.HeartbeatInterval <= 0 || c.HeartbeatTimeout <= 0) {
		return c, &EnvError{Var: "PS_REPLICAS", Value: strconv.Itoa(c.Replicas), Want: "0 while PS_GOSSIP_PORT=0 and heartbeats are off: nothing would find a dead server, so no backup would ever take its place; leave membership gossip on (PS_GOSSIP_PORT unset) or set PS_HEARTBEAT_INTERVAL and PS_HEARTBEAT_TIMEOUT"}
	}
	if c.Replicas > 0 && c.Replicas >= c.NumServers {
		return c, &EnvError{Var: "PS_REPLICAS", Value: strconv.Itoa(c.Replicas), Want: fmt.Sprintf("fewer than DMLC_NUM_SERVER=%d (each backup is on another server)", c.NumServers)}
	}
	if c.Standby && (c.Role != message.RoleServer || !c.Elastic) {
		return c, &EnvError{Var: "PS_STANDBY", Value: "1", Want: "0, or 1 on a server of an elastic job (DMLC_ROLE=server and PS_ELASTIC=1)"}
	}
	c.SnapshotDir = get("PS_SNAPSHOT_DIR")
	si, err := optionalInt(get, "PS_SNAPSHOT_INTERVAL", int(DefaultSnapshotInterval/time.Second), 1, "seconds >= 1 between a server's snapshots (default 60)")
	if err != nil {
		return c, err
	}
	c.SnapshotInterval = time.Duration(si) * time.Second
	if c.Sync, err = syncFromEnv(get); err != nil {
		return c, err
	}
	if c.Limits, err = limitsFromEnv(get); err != nil {
		return c, err
	}
	return c, nil
}

// syncFromEnv reads PS_SYNC_MODE, PS_STALENESS, PS_PAUSE_PROB and
// PS_SYNC_SEED on every node, so that a typo stops the job at once rather
// than only its servers.
func syncFromEnv(get func(string) string) (SyncConfig, error) {
	s := SyncConfig{Staleness: DefaultStaleness, Sigmoid: true}
	if v := get("PS_SYNC_MODE"); v != "" {
		m, err := syncctl.ParseMode(v)
		if err != nil {
			return s, &EnvError{Var: "PS_SYNC_MODE", Value: v, Want: "asp (the default: never wait), bsp, ssp or fluent"}
		}
		s.Mode = m
	}
	if v := get("PS_STALENESS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return s, &EnvError{Var: "PS_STALENESS", Value: v, Want: "the staleness bound s in iterations, an integer >= 0 (default 3)"}
		}
		s.Staleness = n
	}
	if v := get("PS_PAUSE_PROB"); v != "" && v != "sigmoid" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || !(p >= 0 && p <= 1) {
			return s, &EnvError{Var: "PS_PAUSE_PROB", Value: v, Want: "a probability from 0 to 1, or sigmoid (the default: 1/(1+e^(s-gap)))"}
		}
		s.PauseProb, s.Sigmoid = p, false
	}
	if v := get("PS_SYNC_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s, &EnvError{Var: "PS_SYNC_SEED", Value: v, Want: "an integer (default 0)"}
		}
		s.Seed = n
	}
	return s, nil
}

func requiredInt(get func(string) string, key string, min int, want string) (int, error) {
	v := get(key)
	if v == "" {
		return 0, &EnvError{Var: key, Want: want}
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		return 0, &EnvError{Var: key, Value: v, Want: want}
	}
	return n, nil
}

// trimmed reads variables from env without surrounding white space.
func trimmed(env Getenv) func(string) string {
	return func(k string) string { v, _ := env(k); return strings.TrimSpace(v) }
}

// IntFromEnv reads an optional integer variable from env as ConfigFromEnv
// reads its own: unset or empty gives def; anything but an integer from
// min to max is an *EnvError that asks for want. It is for variables read
// outside ConfigFromEnv (the C++ bridge's PS_WAIT_SPIN_US).
func IntFromEnv(env Getenv, key string, def, min, max int, want string) (int, error) {
	get := trimmed(env)
	n, err := optionalInt(get, key, def, min, want)
	if err == nil && n > max {
		return 0, &EnvError{Var: key, Value: get(key), Want: want}
	}
	return n, err
}

func optionalInt(get func(string) string, key string, def, min int, want string) (int, error) {
	v := get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		return 0, &EnvError{Var: key, Value: v, Want: want}
	}
	return n, nil
}

// resolveHost returns host if it is an IP address, else its first IPv4
// address (the interfaces nodeHost picks from are IPv4 too), else its
// first address.
func resolveHost(host string) (string, error) {
	if net.ParseIP(host) != nil {
		return host, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return "", err
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip.String(), nil
		}
	}
	return ips[0].String(), nil
}

// nodeHost resolves the address to advertise, with ps-lite's precedence.
func nodeHost(host, iface string) (string, error) {
	if host != "" {
		ip, err := resolveHost(host)
		if err != nil {
			return "", &EnvError{Var: "DMLC_NODE_HOST", Value: host, Want: "this node's IP address or a host name that resolves (" + err.Error() + ")"}
		}
		return ip, nil
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("cannot list network interfaces (%v): set DMLC_NODE_HOST to this node's IP", err)
	}
	for _, it := range ifaces {
		if iface != "" && !strings.HasPrefix(it.Name, iface) {
			continue
		}
		if iface == "" && (it.Flags&net.FlagLoopback != 0 || it.Flags&net.FlagUp == 0) {
			continue
		}
		addrs, _ := it.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String(), nil
			}
		}
	}
	if iface != "" {
		return "", &EnvError{Var: "DMLC_INTERFACE", Value: iface, Want: "the name (or prefix) of a network interface with an IPv4 address, or set DMLC_NODE_HOST"}
	}
	// Unlike ps-lite (which aborts on a host with only lo), a loopback-only
	// machine gets 127.0.0.1 so single-host jobs work out of the box.
	return "127.0.0.1", nil
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	if l := slog.Default(); l != startDefault {
		return l // the program chose its own
	}
	return jobLogger()
}

// startDefault is slog's default logger before any program code ran
// (package main initializes after this package). A program that kept it
// logs in the job's format, as elasticps's roles and C++ nodes do.
var startDefault = slog.Default()

var jobLogger = sync.OnceValue(func() *slog.Logger { return logfmt.New(os.Stderr, slog.LevelInfo) })

// validate checks a Config built in Go (ConfigFromEnv already checked its own).
func (c *Config) validate() error {
	if c.Role != message.RoleScheduler && c.Role != message.RoleServer && c.Role != message.RoleWorker {
		return fmt.Errorf("postoffice: invalid role %d: use message.RoleWorker, RoleServer or RoleScheduler", c.Role)
	}
	if c.NumWorkers < 0 || c.NumServers < 0 || c.NumWorkers+c.NumServers == 0 {
		return fmt.Errorf("postoffice: NumWorkers=%d NumServers=%d: need non-negative counts with at least one node", c.NumWorkers, c.NumServers)
	}
	if c.SchedulerHost == "" || c.SchedulerPort <= 0 || c.SchedulerPort > 65535 {
		return fmt.Errorf("postoffice: scheduler address %s:%d is invalid: set SchedulerHost and SchedulerPort (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT)", c.SchedulerHost, c.SchedulerPort)
	}
	if err := c.Sync.validate(); err != nil {
		return err
	}
	if err := c.validateGroup(); err != nil {
		return err
	}
	if c.Role != message.RoleScheduler && c.NodeHost == "" {
		c.NodeHost = "127.0.0.1"
	}
	if c.ResendTimeout <= 0 {
		c.ResendTimeout = time.Second
	}
	if c.CustomerWait <= 0 {
		c.CustomerWait = 5 * time.Second
	}
	if c.InlineHandOver == 0 {
		c.InlineHandOver = DefaultInlineHandOver
	}
	if c.VanType == "" {
		c.VanType = "zmq"
	}
	return c.Limits.withDefaults()
}

// authToken reads PS_AUTH_TOKEN or PS_AUTH_TOKEN_FILE (not both).
func authToken(get func(string) string) (string, error) {
	tok, file := get("PS_AUTH_TOKEN"), get("PS_AUTH_TOKEN_FILE")
	switch {
	case tok != "" && file != "":
		return "", errors.New("postoffice: both PS_AUTH_TOKEN and PS_AUTH_TOKEN_FILE are set: set one of them")
	case file == "":
		return tok, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("postoffice: PS_AUTH_TOKEN_FILE: cannot read the job's token: %w (create the file, readable by this user, or set PS_AUTH_TOKEN)", err)
	}
	tok = strings.TrimRight(strings.SplitN(string(b), "\n", 2)[0], "\r")
	if tok == "" {
		return "", fmt.Errorf("postoffice: PS_AUTH_TOKEN_FILE %s: the first line is empty; it must hold the job's token", file)
	}
	return tok, nil
}
