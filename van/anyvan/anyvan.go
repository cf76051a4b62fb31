// Package anyvan opens any van by name: Open is the one function every
// caller uses (postoffice.NewTransport, the whole-job tests through
// FromTestEnv), so that a transport's options and its environment are
// read in one place.
//
// It is a package of its own, not part of van, because it imports the
// transports, which import van.
package anyvan

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/memvan"
	"github.com/elasticps/elasticps/van/rdma"
	"github.com/elasticps/elasticps/van/samehost"
	"github.com/elasticps/elasticps/van/shm"
	"github.com/elasticps/elasticps/van/tcp"
	"github.com/elasticps/elasticps/van/zmq"
)

// Kinds is the list of van names Open accepts, for error messages.
const Kinds = "zmq, tcp, shm, samehost, ibverbs, fabric or mem"

// Open returns an unbound transport of the given kind:
//
//   - "zmq" (or ""): van/zmq, wire-compatible with C++ ps-lite;
//   - "tcp": van/tcp, pure Go, for jobs whose nodes are all elasticps;
//     with PS_SHM_AUTO=1 (or BYTEPS_ENABLE_IPC=1) in the environment,
//     "samehost";
//   - "samehost": van/samehost, shm to the peers on this host and tcp to
//     the others (PS_SHM_SPIN_US read as for "shm");
//   - "shm": van/shm, shared memory between nodes on one host (Linux),
//     for jobs whose nodes are all elasticps, with its receive polling
//     read from the environment by shm.ConfigFromEnv (PS_SHM_SPIN_US);
//   - "ibverbs", "fabric": van/rdma (builds with -tags rdma, else
//     rdma.ErrNotBuilt), with the BytePS fork's tunables read from the
//     environment by rdma.ConfigFromEnv (BYTEPS_RDMA_*, FI_PROVIDER,
//     DMLC_INTERFACE);
//   - "mem": van/memvan, on one network shared by every "mem" transport
//     Open returns in this process, so that a job run inside one process
//     (tests) can use it.
//
// Every van gets opts (see van.Options for which van reads what); only
// zmq accepts a Wire other than dmlc.
func Open(kind string, opts van.Options) (van.Transport, error) {
	return OpenEnv(kind, nil, opts)
}

// OpenEnv is Open with the vans' own variables (PS_SHM_AUTO,
// BYTEPS_ENABLE_IPC, PS_SHM_SPIN_US, BYTEPS_RDMA_*, ...) read from env
// instead of the process environment: a C++ program's setenv or
// Environment::Init map reaches a bridge node only through its env, as
// the Go runtime keeps its own copy of the environment. nil env:
// os.LookupEnv.
func OpenEnv(kind string, env func(string) (string, bool), opts van.Options) (van.Transport, error) {
	if env == nil {
		env = os.LookupEnv
	}
	if opts.Wire != message.WireDmlc && kind != "" && kind != "zmq" {
		return nil, fmt.Errorf("anyvan: %s=%s needs the zmq van (DMLC_PS_VAN_TYPE=zmq), the one that speaks C++ ps-lite's wire; the %s van speaks only the dmlc wire",
			message.WireEnv, opts.Wire, kind)
	}
	if opts.Encryption != nil && kind != "" && kind != "zmq" && kind != "tcp" {
		return nil, fmt.Errorf("anyvan: PS_ENCRYPT=on needs DMLC_PS_VAN_TYPE=zmq (CURVE) or tcp (TLS); the %s van has no encryption", kind)
	}
	kind, err := Kind(kind, env)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "zmq":
		return ok(zmq.New(zmq.Config{Options: opts}))
	case "tcp":
		return ok(tcp.New(tcp.Config{Options: opts}))
	case "samehost":
		return openSameHost(env, opts)
	case "shm":
		cfg, err := shm.ConfigFromEnv(env)
		if err != nil {
			return nil, err
		}
		cfg.Options = opts
		return ok(shm.New(cfg))
	case "ibverbs", "fabric":
		cfg, err := rdma.ConfigFromEnv(rdma.Backend(kind), env)
		if err != nil {
			return nil, err
		}
		cfg.Options = opts
		return ok(rdma.New(cfg))
	case "mem":
		return ok(memNetwork().NewTransport(opts))
	}
	return nil, fmt.Errorf("anyvan: unknown van %q: use %s", kind, Kinds)
}

// Kind is the van OpenEnv(kind, env, ...) opens: kind, "zmq" for "", or
// "samehost" for "tcp" with PS_SHM_AUTO=1 or BYTEPS_ENABLE_IPC=1 in env.
func Kind(kind string, env func(string) (string, bool)) (string, error) {
	switch kind {
	case "":
		return "zmq", nil
	case "tcp":
		if auto, err := samehost.Enabled(env); err != nil {
			return "", err
		} else if auto {
			return "samehost", nil
		}
	}
	return kind, nil
}

func openSameHost(env func(string) (string, bool), opts van.Options) (van.Transport, error) {
	cfg, err := shm.ConfigFromEnv(env)
	if err != nil {
		return nil, err
	}
	cfg.Options = opts
	cfg.Options.Encryption = nil // samehost refuses it, named by the tcp side
	return ok(samehost.New(samehost.Config{TCP: tcp.Config{Options: opts}, SHM: cfg}))
}

// memNetwork is the process's network for Open("mem").
var memNetwork = sync.OnceValue(memvan.NewNetwork)

// ok turns a (concrete pointer, error) pair into an interface that is nil
// on error, never a typed nil.
func ok[T van.Transport](t T, err error) (van.Transport, error) {
	if err != nil {
		return nil, err
	}
	return t, nil
}

// TestEnvVar is the environment variable that selects the transport of the
// whole-job test suites (kv, postoffice), which so run unchanged over every
// van:
//
//	ELASTICPS_TEST_VAN=fabric go test -tags rdma ./kv/ ./postoffice/
//
// zmq (the default), tcp, shm, samehost and mem need nothing more; fabric and ibverbs need
// a build with -tags rdma (see van/rdma), and ibverbs an RDMA device. For
// fabric, FI_PROVIDER picks the libfabric provider (unset: libfabric's
// first choice for 127.0.0.1, tcp;ofi_rxm on a plain Linux host).
const TestEnvVar = "ELASTICPS_TEST_VAN"

// TestKind returns the transport TestEnvVar selects: "zmq" when unset.
func TestKind() string {
	if v := strings.TrimSpace(os.Getenv(TestEnvVar)); v != "" {
		return strings.ToLower(v)
	}
	return "zmq"
}

// TestWireEnvVar selects the meta wire of the whole-job test suites, as
// PS_WIRE does for a node (zmq van only):
//
//	ELASTICPS_TEST_WIRE=bytedance go test ./kv/ ./postoffice/
const TestWireEnvVar = "ELASTICPS_TEST_WIRE"

// TestWire returns the wire TestWireEnvVar selects: dmlc when unset.
func TestWire() (message.Wire, error) {
	w, err := message.ParseWire(os.Getenv(TestWireEnvVar))
	if err != nil {
		return w, fmt.Errorf("%s: %w", TestWireEnvVar, err)
	}
	return w, nil
}

// FromTestEnv opens the transport TestEnvVar selects for a test node on
// 127.0.0.1, with the wire TestWireEnvVar selects, logging to logger.
func FromTestEnv(logger *slog.Logger) (van.Transport, error) {
	wire, err := TestWire()
	if err != nil {
		return nil, err
	}
	tr, err := Open(TestKind(), van.Options{Host: "127.0.0.1", Wire: wire, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", TestEnvVar, TestKind(), err)
	}
	return tr, nil
}
