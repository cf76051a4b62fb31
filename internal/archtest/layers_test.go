// Package archtest checks the layering of the module's packages: each
// package may import only packages of a lower layer (DESIGN.md, "Layers and
// packages"), so that no import runs back up the layers.
package archtest

import (
	"bytes"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/elasticps/elasticps/"

// layers places every package of the module, bottom-up. A new package gets
// its place here on purpose: the test fails for a package it does not know.
var layers = map[string]int{
	"message": 0, "metrics": 0, "membership": 0, "rebalance": 0,
	"internal/cli": 0, "internal/stats": 0, "internal/plot": 0, "internal/ports": 0,
	"internal/testutil": 0, "internal/archtest": 0, "internal/logfmt": 0, "internal/ratelog": 0, "van/internal/bufpool": 0, "van/internal/peerauth": 0,
	"syncctl":  0, // IO-free, like rebalance
	"snapshot": 0, // snapshot files; stores plug in by interface

	"van/internal/recvmsg": 1, "launcher": 1, "routing": 1, "scheduler": 1, // pure, on message
	"internal/porttest": 1, // on internal/ports

	"van": 2, // the transport contract

	"replica": 2, // placement, promotion, applied pushes: pure, on routing

	"van/zmq": 3, "van/tcp": 3, "van/rdma": 3, "van/memvan": 3, "van/shm": 3, "van/vantest": 3,

	"van/samehost": 4, // shm to this host's peers, tcp to the others

	"van/anyvan": 5, // opens any of them

	"postoffice": 6, // a node's control plane

	"kv": 7, // customers, workers, servers, stores; the Router and RequestGate hooks

	"elastic": 8, // implements kv's hooks

	"paramstore": 8, // the training store: a kv handler, elastic's Migrator by its methods

	"elastic/coord": 9, // the scheduler's side of elastic mode

	"internal/nodeproc": 10, "internal/jobtest": 10, "cbridge/capi": 10, "examples/go/quickstart": 10,

	"internal/bench": 11, "internal/straggler": 11, "internal/train": 11, "internal/failover": 11,

	"cmd/elasticps": 12, "e2e": 12,
}

// TestNoImportRunsUpTheLayers lists every package of the module with its
// imports (not its tests': a test may use a harness above it) and fails
// for an import of a package on the same or a higher layer, and for a
// package the table does not place.
func TestNoImportRunsUpTheLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	require.NoError(t, err, "go list: %s", exitStderr(err))
	listed := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		listed[pkg] = true
		layer, ok := layers[pkg]
		if !assert.True(t, ok, "package %s has no layer: give it one in layers", pkg) {
			continue
		}
		for _, imp := range fields[1:] {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			assert.Less(t, layers[dep], layer, "%s (layer %d) imports %s (layer %d): an import up or across the layers", pkg, layer, dep, layers[dep])
		}
	}
	var unknown []string
	for pkg := range layers {
		if !listed[pkg] {
			unknown = append(unknown, pkg)
		}
	}
	sort.Strings(unknown)
	assert.Empty(t, unknown, "layers names packages that do not exist")
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(bytes.TrimSpace(ee.Stderr))
	}
	return ""
}
