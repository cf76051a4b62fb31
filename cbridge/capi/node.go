package main

/*
#include <stdlib.h>
#include "shims.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/rdma"
	"github.com/elasticps/elasticps/van/zmq"
)

// ps-lite keeps one Postoffice per process, configured from the environment
// the first time it is needed; C++ code reaches it through static functions.
// The bridge mirrors that with one node per process: created on first use
// (an app constructor, Start, or a query such as NumWorkers), stopped by
// Finalize of customer 0, after which the next use creates a fresh one.
var node struct {
	mu      sync.Mutex
	po      *postoffice.Postoffice
	elastic *elastic.Node // nil unless PS_ELASTIC=1 (and on the scheduler)
	// On an elastic scheduler, the balancer and its coordinator, which
	// run until cancel (at Finalize of customer 0 or the node's stop).
	balancer *coord.Balancer
	cancel   context.CancelFunc
	// worker is the worker node of a JOINT process (po is its server
	// node), nil otherwise; workerElastic its elastic side.
	worker        *postoffice.Postoffice
	workerElastic *elastic.Node
	// With instance groups (DMLC_GROUP_SIZE > 1, groups.go): instances 1
	// to GroupSize-1 of po (more) and, in a JOINT process, of worker
	// (moreWorkers); po and worker are instance 0.
	more, moreWorkers []*postoffice.Postoffice
}

// Node slots: which of a process's nodes a C++ Postoffice is. slotMain is
// the process's node (a JOINT process's server node); slotWorker is the
// worker node of a JOINT process and the main node in any other process.
const (
	slotMain   = 0
	slotWorker = 1
)

// envOverrides are the values of ps::Environment::Init, which take
// precedence over the process environment.
var envOverrides struct {
	mu sync.RWMutex
	m  map[string]string
}

func setEnvOverride(key string, value *string) {
	envOverrides.mu.Lock()
	defer envOverrides.mu.Unlock()
	if envOverrides.m == nil {
		envOverrides.m = map[string]string{}
	}
	if value == nil {
		delete(envOverrides.m, key)
		return
	}
	envOverrides.m[key] = *value
}

func clearEnvOverrides() {
	envOverrides.mu.Lock()
	envOverrides.m = nil
	envOverrides.mu.Unlock()
}

// lookupEnv is the Getenv of the bridge: Environment::Init's map first, then
// the C environment. It reads the C environment with getenv rather than
// os.LookupEnv because the Go runtime copies the environment when the
// library is initialised, and hosts commonly set DMLC_* later (Python's
// os.environ, setenv before ps::Start).
func lookupEnv(key string) (string, bool) {
	envOverrides.mu.RLock()
	v, ok := envOverrides.m[key]
	envOverrides.mu.RUnlock()
	if ok {
		return v, true
	}
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	p := C.getenv(ck)
	if p == nil {
		return "", false
	}
	return C.GoString(p), true
}

var roleNames = map[int]string{
	int(message.RoleServer):    "server",
	int(message.RoleWorker):    "worker",
	int(message.RoleScheduler): "scheduler",
}

// roleJoint is the BytePS fork's JOINT role: a server node and a worker
// node in one process, each registered with the scheduler as any server
// and worker (DMLC_NUM_SERVER and DMLC_NUM_WORKER count it in both).
const roleJoint = 3

// processRole is role, or for PS_ROLE_FROM_ENV (-1) roleJoint when
// DMLC_ROLE is "joint" and -1 otherwise.
func processRole(role int) int {
	if role >= 0 {
		return role
	}
	if v, _ := lookupEnv("DMLC_ROLE"); v == "joint" {
		return roleJoint
	}
	return -1
}

// nodeEnv returns the Getenv used to configure a new node. role >= 0
// replaces DMLC_ROLE (the BytePS fork's StartPS(role) does), and the p3 van
// of MXNet is served by the zmq transport.
func nodeEnv(role int) postoffice.Getenv {
	return func(key string) (string, bool) {
		if key == "DMLC_ROLE" && role >= 0 {
			return roleNames[role], true
		}
		v, ok := lookupEnv(key)
		if key == "DMLC_RANK" && ok && ownRank(v) {
			return "", false // what the previous start published
		}
		if key == "DMLC_PS_VAN_TYPE" && v == "p3" {
			slog.Warn("elasticps: DMLC_PS_VAN_TYPE=p3: using the zmq transport; priorities still order each server's queue, but sends are not reordered")
			return "zmq", true
		}
		return v, ok
	}
}

// checkUnsupported rejects settings of ps-lite forks the bridge does not
// implement, with the reason, instead of silently behaving differently.
func checkUnsupported(env postoffice.Getenv) error {
	if v, ok := env("DMLC_ENABLE_RDMA"); ok && v != "" && v != "0" && v != "zmq" && !rdma.Built {
		return fmt.Errorf("elasticps: DMLC_ENABLE_RDMA=%s: this libps was built without the RDMA van; rebuild it with make USE_RDMA=1 (needs libibverbs-dev, librdmacm-dev, libfabric-dev), or unset DMLC_ENABLE_RDMA", v)
	}
	if v, ok := env("DMLC_ENABLE_UCX"); ok && v != "" && v != "0" {
		return fmt.Errorf("elasticps: DMLC_ENABLE_UCX=%s: this build has only the zmq transport; unset DMLC_ENABLE_UCX", v)
	}
	return nil
}

// ensureNode returns the process's (main) node, creating it from the
// environment if there is none; for a JOINT process (role roleJoint, or
// DMLC_ROLE=joint) it creates the server node (the main one) and the
// worker node. role >= 0 must match the existing nodes' role.
func ensureNode(role int) (*postoffice.Postoffice, error) {
	role = processRole(role)
	node.mu.Lock()
	defer node.mu.Unlock()
	if po := node.po; po != nil {
		have := int(po.Role())
		if node.worker != nil {
			have = roleJoint
		}
		if role >= 0 && role != have {
			return nil, fmt.Errorf("elasticps: this process's node is a %s (from DMLC_ROLE or an earlier start); it cannot also start as a %s", roleName(have), roleName(role))
		}
		return po, nil
	}
	if role != roleJoint {
		po, en, err := openNode(role, 0)
		if err == nil {
			node.po, node.elastic = po, en
			node.more, err = openInstances(po, role)
		}
		if err != nil {
			stopNodes()
			return nil, err
		}
		return po, nil
	}
	// the fork's JOINT: a server and a worker, each a node of its own
	po, en, err := openNode(int(message.RoleServer), 0)
	if err != nil {
		return nil, err
	}
	w, wen, err := openNode(int(message.RoleWorker), 0)
	if err != nil {
		po.Stop()
		return nil, fmt.Errorf("elasticps: the worker node of this JOINT process: %w", err)
	}
	node.po, node.elastic, node.worker, node.workerElastic = po, en, w, wen
	if node.more, err = openInstances(po, int(message.RoleServer)); err == nil {
		node.moreWorkers, err = openInstances(w, int(message.RoleWorker))
	}
	if err != nil {
		stopNodes()
		return nil, err
	}
	return po, nil
}

// roleName names a role for DMLC_ROLE (roleJoint too).
func roleName(role int) string {
	if role == roleJoint {
		return "joint"
	}
	return roleNames[role]
}

// nodeFor returns the node of a slot (slotMain, slotWorker, plus twice
// the instance, see groups.go), creating the process's nodes if there are
// none.
func nodeFor(slot int) (*postoffice.Postoffice, error) {
	if _, err := ensureNode(-1); err != nil {
		return nil, err
	}
	return slotNode(slot)
}

// jointWorker is the worker node of a JOINT process, nil in any other.
func jointWorker() *postoffice.Postoffice {
	node.mu.Lock()
	defer node.mu.Unlock()
	return node.worker
}

// openNode creates a node of role (-1: DMLC_ROLE) from the environment;
// node.mu is held. An elastic scheduler gets its balancer (node.balancer).
func openNode(role, instance int) (*postoffice.Postoffice, *elastic.Node, error) {
	env := nodeEnv(role)
	if err := checkUnsupported(env); err != nil {
		return nil, nil, err
	}
	cfg, err := postoffice.ConfigFromEnv(env)
	if err != nil {
		return nil, nil, err
	}
	cfg.Instance = instance
	cfg.ShareHostCPUs = shareHostCPUs(cfg.Role)
	spin, err := waitSpinFromEnv(env)
	if err != nil {
		return nil, nil, err
	}
	C.psb_wait_spin_ns = C.int64_t(spin)
	tr, err := newTransport(cfg)
	if err != nil {
		return nil, nil, err
	}
	po, err := postoffice.New(cfg, tr)
	if err != nil {
		_ = tr.Close()
		return nil, nil, err
	}
	en, err := elastic.Open(po)
	if err != nil {
		po.Stop()
		return nil, nil, err
	}
	if cfg.Role == message.RoleScheduler && cfg.Elastic {
		// what 'elasticps scheduler' runs, so that a C++ program's
		// scheduler needs no special launch in an elastic job
		ctx, cancel := context.WithCancel(context.Background())
		bal, err := coord.StartScheduler(ctx, po, env)
		if err != nil {
			cancel()
			po.Stop()
			return nil, nil, err
		}
		context.AfterFunc(ctx, po.Stop)
		node.balancer, node.cancel = bal, cancel
	}
	return po, en, nil
}

// nodeElastic is the elastic side of the process's node po (nil outside
// elastic mode).
func nodeElastic(po *postoffice.Postoffice) *elastic.Node {
	node.mu.Lock()
	defer node.mu.Unlock()
	switch po {
	case node.po:
		return node.elastic
	case node.worker:
		return node.workerElastic
	}
	return nil
}

// nodeBalancer is the balancer of the process's node po (nil unless it is
// an elastic scheduler).
func nodeBalancer(po *postoffice.Postoffice) *coord.Balancer {
	node.mu.Lock()
	defer node.mu.Unlock()
	if node.po != po {
		return nil
	}
	return node.balancer
}

// defaultWaitSpin is how long a C++ Wait may spin before it waits in Go
// (PS_WAIT_SPIN_US), see wait.c.
const defaultWaitSpin = 200 * time.Microsecond

// waitSpinFromEnv reads PS_WAIT_SPIN_US.
func waitSpinFromEnv(env postoffice.Getenv) (time.Duration, error) {
	us, err := postoffice.IntFromEnv(env, "PS_WAIT_SPIN_US", int(defaultWaitSpin/time.Microsecond), 0, 1000000,
		"the microseconds a Wait may spin before it blocks, 0 to 1000000 (0: never spin)")
	return time.Duration(us) * time.Microsecond, err
}

// sendMode says when the node's transport reads the data frames it sends,
// which decides what the bridge must copy before sending C++ memory.
type sendMode int32

const (
	// readsDuringSend: nothing is read after Send returns (the TCP and
	// shared-memory vans).
	readsDuringSend sendMode = iota
	// readsLaterZMQ: the ZeroMQ van sends large frames by reference and
	// zmq.AfterSent tells when libzmq is done with them.
	readsLaterZMQ
	// readsLater: frames may be read after Send, with no notice (RDMA).
	readsLater
)

// nodeSendMode is the node's sendMode, set with its transport.
//
// A KVWorker's requests come from buffers C++ keeps until the operation
// completes, by which time the server has received every byte: they are
// sent by reference by every transport. A KVServer's responses are lent by
// C++ until the transport is done (ZeroMQ), or copied where nothing tells
// when that is (RDMA). What C++ may reuse as soon as the call returns
// (buffers of operations without a completion context) is copied unless
// the transport reads it during Send.
var nodeSendMode atomic.Int32

// sendModeOf is the sendMode of the transport named by DMLC_PS_VAN_TYPE.
// The TCP and shared-memory vans copy every frame during Send (into the
// socket, or into the segment or its message stream), so C++ memory is
// sent without a Go copy first; the RDMA vans, and any transport not
// listed, may read frames later.
func sendModeOf(vanType string) sendMode {
	switch vanType {
	case "", "zmq":
		return readsLaterZMQ
	case "tcp", "shm":
		return readsDuringSend
	default:
		return readsLater
	}
}

// newTransport is postoffice.NewTransport behind retryEINTR, recording its
// sendMode.
func newTransport(cfg postoffice.Config) (van.Transport, error) {
	nodeSendMode.Store(int32(sendModeOf(cfg.VanType)))
	// C++ lends KVServer responses only where the transport may read them
	// after Send: the ZeroMQ van's by-reference frames. Everywhere else
	// they are read during the call (or copied first, see kvResponse).
	lendMin := ^C.size_t(0)
	if sendMode(nodeSendMode.Load()) == readsLaterZMQ && !cfg.Resend {
		lendMin = C.size_t(zmq.DefaultZeroCopySendMin)
	}
	C.psb_set_lend_min(lendMin)
	tr, err := postoffice.NewTransport(cfg)
	if err != nil {
		return nil, err
	}
	return retryEINTR{tr}, nil
}

// currentNode returns the node if one exists, without creating one.
func currentNode() *postoffice.Postoffice {
	node.mu.Lock()
	defer node.mu.Unlock()
	return node.po
}

// startNode starts the process's nodes (every instance) for customerID;
// rank >= 0 is the rank the process asks for (StartPS), overriding
// DMLC_RANK.
func startNode(customerID, role, rank int, barrier bool) error {
	po, err := ensureNode(role)
	if err != nil {
		return err
	}
	nodes := processNodes()
	if rank >= 0 {
		for _, n := range nodes {
			if err := n.SetWantRank(rank); err != nil {
				return err
			}
		}
	}
	start := func(po *postoffice.Postoffice) error {
		if barrier {
			return po.StartWithBarrier(customerID)
		}
		return po.Start(customerID)
	}
	// every node at once: the job is complete only with all of them
	if err = eachNode(nodes, start); err != nil {
		return err
	}
	if po.Role() != message.RoleScheduler {
		publishRank(po.GroupRank())
	}
	return nil
}

// publishedRank is the DMLC_RANK the bridge set itself ("" if none): not a
// rank the process asks for when it starts again (with other DMLC_NUM_*
// values it might not exist).
var publishedRank struct {
	sync.Mutex
	value string
}

// publishRank sets DMLC_RANK to the rank the node got, as ps-lite does
// (some launch scripts and consumers read it back), unless the process
// had set it: then it was the rank asked for, and the node got it.
func publishRank(rank int) {
	publishedRank.Lock()
	defer publishedRank.Unlock()
	if v, ok := lookupEnv("DMLC_RANK"); ok && v != publishedRank.value {
		return
	}
	v := strconv.Itoa(rank)
	if err := os.Setenv("DMLC_RANK", v); err != nil {
		slog.Warn("elasticps: cannot set DMLC_RANK", "err", err)
		return
	}
	publishedRank.value = v
}

// ownRank reports whether v is the DMLC_RANK the bridge published.
func ownRank(v string) bool {
	publishedRank.Lock()
	defer publishedRank.Unlock()
	return publishedRank.value != "" && v == publishedRank.value
}

func finalizeNode(customerID int, barrier bool) error {
	po := currentNode()
	if po == nil {
		// Nothing was started (or customer 0 already finalized): ps-lite
		// would operate on a stopped van; there is nothing to do.
		return nil
	}
	var err error
	if bal := nodeBalancer(po); bal != nil && customerID == 0 && barrier {
		// An elastic scheduler ends the job as 'elasticps scheduler' does:
		// the final barrier, then it releases the standby servers, which
		// are in no barrier group.
		if err = po.Barrier(0, message.AllGroup); err == nil {
			bal.Coordinator().ReleaseStandbys()
		}
		err = errors.Join(err, po.Finalize(0, false))
	} else {
		// the final barrier includes every node of the process
		err = eachNode(processNodes(), func(po *postoffice.Postoffice) error { return po.Finalize(customerID, barrier) })
	}
	if customerID == 0 {
		node.mu.Lock()
		if node.po == po {
			if node.cancel != nil {
				node.cancel()
			}
			node.po, node.elastic, node.balancer, node.cancel = nil, nil, nil, nil
			node.worker, node.workerElastic = nil, nil
			node.more, node.moreWorkers = nil, nil
		}
		node.mu.Unlock()
	}
	if err != nil && customerID != 0 && errors.Is(err, postoffice.ErrStopped) {
		// Customer 0 of this process stopped the node while this customer
		// was leaving its final barrier: the barrier had completed.
		err = nil
	}
	return err
}

// eachNode runs f on every one of nodes at once.
func eachNode(nodes []*postoffice.Postoffice, f func(*postoffice.Postoffice) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = f(n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func isReady(po *postoffice.Postoffice) bool {
	select {
	case <-po.Ready():
		return true
	default:
		return false
	}
}
