// Package anyvan builds the transport that the environment names, so that
// whole-job test suites (kv, postoffice) run unchanged over every van:
//
//	ELASTICPS_TEST_VAN=fabric go test -tags rdma ./kv/ ./postoffice/
//
// zmq (the default) and tcp need nothing more; fabric and ibverbs need a
// build with -tags rdma (see van/rdma), and ibverbs an RDMA device. For
// fabric, FI_PROVIDER picks the libfabric provider (unset: libfabric's
// first choice for 127.0.0.1, tcp;ofi_rxm on a plain Linux host).
//
// It is a package of its own, not part of van/vantest, because it imports
// the transports, whose own tests import van/vantest.
package anyvan

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/rdma"
	"github.com/elasticps/elasticps/van/tcp"
	"github.com/elasticps/elasticps/van/zmq"
)

// EnvVar is the environment variable that selects the transport.
const EnvVar = "ELASTICPS_TEST_VAN"

// Name returns the transport the environment selects: "zmq" when unset.
func Name() string {
	if v := strings.TrimSpace(os.Getenv(EnvVar)); v != "" {
		return strings.ToLower(v)
	}
	return "zmq"
}

// New returns an unbound transport of the selected kind for a test node on
// 127.0.0.1, logging to logger.
func New(logger *slog.Logger) (van.Transport, error) {
	switch name := Name(); name {
	case "zmq":
		return ok(zmq.New(zmq.Config{Logger: logger}))
	case "tcp":
		return ok(tcp.New(tcp.Config{Logger: logger}))
	case "fabric", "ibverbs":
		return ok(rdma.New(rdma.Config{Backend: rdma.Backend(name), Host: "127.0.0.1",
			Provider: os.Getenv("FI_PROVIDER"), Logger: logger}))
	default:
		return nil, fmt.Errorf("anyvan: %s=%q: use zmq, tcp, fabric or ibverbs", EnvVar, name)
	}
}

// ok turns a (concrete pointer, error) pair into an interface that is nil
// on error, never a typed nil.
func ok[T van.Transport](t T, err error) (van.Transport, error) {
	if err != nil {
		return nil, err
	}
	return t, nil
}
