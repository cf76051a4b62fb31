package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/zmq"
)

// The C ABI itself is exercised end to end by ../../compat_tests (C++
// programs linked with libps.a); these tests cover the Go-side rules.

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvOverridesTakePrecedence(t *testing.T) {
	t.Setenv("ELASTICPS_CAPI_TEST", "from-env")
	requireLookup := func(want, why string) {
		t.Helper()
		v, ok := lookupEnv("ELASTICPS_CAPI_TEST")
		require.True(t, ok, why)
		require.Equal(t, want, v, why)
	}
	requireLookup("from-env", "want the process environment's value")
	v := "from-init"
	setEnvOverride("ELASTICPS_CAPI_TEST", &v)
	defer clearEnvOverrides()
	requireLookup("from-init", "want Environment::Init's value")
	setEnvOverride("ELASTICPS_CAPI_TEST", nil)
	requireLookup("from-env", "after removing the override, want the environment's")
	_, ok := lookupEnv("ELASTICPS_CAPI_TEST_UNSET")
	assert.False(t, ok, "an unset variable was found")
}

func TestNodeEnvRoleOverrideAndP3(t *testing.T) {
	t.Setenv("DMLC_ROLE", "worker")
	t.Setenv("DMLC_PS_VAN_TYPE", "p3")
	get := nodeEnv(int(message.RoleServer))
	v, _ := get("DMLC_ROLE")
	assert.Equal(t, "server", v, "StartPS(SERVER) must override the environment's DMLC_ROLE")
	v, _ = nodeEnv(-1)("DMLC_ROLE")
	assert.Equal(t, "worker", v, "without a role the environment's DMLC_ROLE applies")
	v, _ = get("DMLC_PS_VAN_TYPE")
	assert.Equal(t, "zmq", v, "MXNet's p3 runs on the zmq transport")
}

func TestCheckUnsupported(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // substring of the error; "" for none
	}{
		{"plain", map[string]string{}, ""},
		{"group size 1", map[string]string{"DMLC_GROUP_SIZE": "1"}, ""},
		{"group size 2", map[string]string{"DMLC_GROUP_SIZE": "2"}, ""}, // instance groups (groups.go)
		{"rdma zmq", map[string]string{"DMLC_ENABLE_RDMA": "zmq"}, ""},
		{"rdma ibverbs", map[string]string{"DMLC_ENABLE_RDMA": "ibverbs"}, "DMLC_ENABLE_RDMA"},
		{"ucx", map[string]string{"DMLC_ENABLE_UCX": "1"}, "DMLC_ENABLE_UCX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkUnsupported(env(tc.env))
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// DMLC_ROLE=joint makes a JOINT process when no role is given; a role
// given (StartPS) wins.
func TestProcessRole(t *testing.T) {
	t.Setenv("DMLC_ROLE", "joint")
	assert.Equal(t, roleJoint, processRole(-1), "DMLC_ROLE=joint")
	assert.Equal(t, int(message.RoleWorker), processRole(int(message.RoleWorker)), "StartPS(WORKER) with DMLC_ROLE=joint")
	t.Setenv("DMLC_ROLE", "server")
	assert.Equal(t, -1, processRole(-1), "DMLC_ROLE=server is read by the node's config")
	assert.Equal(t, "joint", roleName(roleJoint))
	assert.Equal(t, "worker", roleName(int(message.RoleWorker)))
}

type uncomparableError struct{ parts []string }

func (e uncomparableError) Error() string { return strings.Join(e.parts, ",") }

func TestSameError(t *testing.T) {
	a := errors.New("a")
	assert.True(t, sameError(a, a), "an error is the same as itself")
	assert.False(t, sameError(a, errors.New("a")), "distinct errors with the same text are not the same")
	u := uncomparableError{[]string{"x"}}
	assert.False(t, sameError(u, u), "uncomparable errors must compare false, not panic")
	assert.False(t, sameError(nil, nil), "nil is not a reported error")
}

// fakeTransport returns the queued results from Recv.
type fakeTransport struct {
	van.Transport
	results []error
	calls   int
}

func (f *fakeTransport) Recv() (*message.Message, error) {
	err := f.results[f.calls]
	f.calls++
	if err != nil {
		return nil, err
	}
	return &message.Message{}, nil
}

func TestRetryEINTR(t *testing.T) {
	eintr := fmt.Errorf("van/zmq: recv: %w", syscall.EINTR)
	f := &fakeTransport{results: []error{eintr, eintr, nil}}
	m, err := retryEINTR{f}.Recv()
	require.NoError(t, err, "want a message after retrying two EINTRs")
	assert.NotNil(t, m)
	assert.Equal(t, 3, f.calls, "Recv calls")
	f = &fakeTransport{results: []error{van.ErrClosed}}
	_, err = retryEINTR{f}.Recv()
	assert.ErrorIs(t, err, van.ErrClosed, "other errors must pass through")
	assert.Equal(t, 1, f.calls, "Recv calls")
}

// A KVServer's migration handle is never called once the C++ object is
// being deleted, and only a KVServer has one.
func TestMigrationAfterClose(t *testing.T) {
	a := &app{kind: kindServer}
	a.closeMigration()
	_, err := cMigrator{a: a}.Export(0, 10)
	assert.ErrorIs(t, err, errServerDeleted, "Export after close")
	assert.ErrorIs(t, cMigrator{a: a}.Import([]byte{1}), errServerDeleted, "Import after close")
	assert.ErrorContains(t, (&app{kind: kindWorker}).setMigration(true), "only a KVServer", "setMigration on a KVWorker")
}

// The missing-state-hook check waits for the program's choice (a request
// that arrives before set_request_handle is no verdict), then runs once;
// the warning says what is lost and how to add the hook.
func TestStateHookCheck(t *testing.T) {
	a := &app{kind: kindServer}
	a.checkStateHook()
	assert.False(t, a.hookChecked.Load(), "checked before the program set a request handler or a hook")
	require.NoError(t, a.setMigration(false))
	assert.Equal(t, hookNone, a.hook.Load(), "a handler without a hook")
	a.checkStateHook()
	assert.True(t, a.hookChecked.Load(), "not checked once the handler was set")
	require.NoError(t, a.setMigration(true))
	assert.Equal(t, hookSet, a.hook.Load(), "a hook")
	w := stateHookWarning(2)
	assert.Contains(t, w, "not replicated (PS_REPLICAS=2")
	assert.Contains(t, w, "KVServer::set_migration_handle")
	assert.NotContains(t, stateHookWarning(0), "replicated", "a job without replicas")
	assert.NotContains(t, w, "\n", "one line")
}

func TestWaitSpinFromEnv(t *testing.T) {
	for _, tc := range []struct {
		value string
		set   bool
		want  time.Duration
	}{
		{"", false, defaultWaitSpin},
		{"", true, defaultWaitSpin},
		{"0", true, 0},
		{"250", true, 250 * time.Microsecond},
		{"1000000", true, time.Second},
	} {
		m := map[string]string{}
		if tc.set {
			m["PS_WAIT_SPIN_US"] = tc.value
		}
		got, err := waitSpinFromEnv(env(m))
		if assert.NoError(t, err, "PS_WAIT_SPIN_US=%q (set %v)", tc.value, tc.set) {
			assert.Equal(t, tc.want, got, "PS_WAIT_SPIN_US=%q (set %v)", tc.value, tc.set)
		}
	}
	for _, bad := range []string{"-1", "1000001", "ten", "1.5"} {
		_, err := waitSpinFromEnv(env(map[string]string{"PS_WAIT_SPIN_US": bad}))
		assert.ErrorContains(t, err, "PS_WAIT_SPIN_US=\""+bad+"\"", "the error names the value")
		assert.ErrorContains(t, err, "0 to 1000000", "the error names the range")
	}
}

// notifierSink keeps the Notifier of TestWaiterWordDoesNotAllocate
// reachable, so that the conversion cannot be optimised away.
var notifierSink kv.Notifier

// TestWaiterWordDoesNotAllocate checks that registering a C++ thread's
// waiter word as a request's completion notice (every spinning Wait does)
// costs no allocation.
func TestWaiterWordDoesNotAllocate(t *testing.T) {
	var word uint32
	w := unsafe.Pointer(&word)
	allocs := testing.AllocsPerRun(100, func() { notifierSink = waiterWord{w} })
	assert.Zero(t, allocs, "allocations of a waiterWord as a kv.Notifier")
}

// TestCopiedBySend checks the bound under which KVServer::Response passes
// no kept arrays: every array shorter than the ZeroMQ van's by-reference
// threshold, which Send copies during the call.
func TestCopiedBySend(t *testing.T) {
	n := zmq.DefaultZeroCopySendMin
	cases := []struct {
		name string
		res  kv.KVPairs
		want bool
	}{
		{"empty", kv.KVPairs{}, true},
		{"vals just below", kv.KVPairs{Keys: make([]uint64, 1), Vals: make([]byte, n-1)}, true},
		{"vals at the threshold", kv.KVPairs{Keys: make([]uint64, 1), Vals: make([]byte, n)}, false},
		{"keys at the threshold", kv.KVPairs{Keys: make([]uint64, n/8)}, false},
		{"lens at the threshold", kv.KVPairs{Keys: make([]uint64, 1), Lens: make([]int32, n/4)}, false},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, copiedBySend(c.res), "%s: copiedBySend", c.name)
	}
}

func TestSendModeOf(t *testing.T) {
	for van, want := range map[string]sendMode{
		"":        readsLaterZMQ,
		"zmq":     readsLaterZMQ,
		"tcp":     readsDuringSend,
		"shm":     readsDuringSend, // copied into the segment in Send (van/shm TestSendCopiesFrames)
		"fabric":  readsLater,
		"ibverbs": readsLater,
		"other":   readsLater,
	} {
		assert.Equal(t, want, sendModeOf(van), "DMLC_PS_VAN_TYPE=%q", van)
	}
}
