package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

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
	if v, ok := lookupEnv("ELASTICPS_CAPI_TEST"); !ok || v != "from-env" {
		t.Fatalf("lookupEnv = %q, %v; want the process environment's value", v, ok)
	}
	v := "from-init"
	setEnvOverride("ELASTICPS_CAPI_TEST", &v)
	defer clearEnvOverrides()
	if got, _ := lookupEnv("ELASTICPS_CAPI_TEST"); got != "from-init" {
		t.Fatalf("lookupEnv = %q; want Environment::Init's value", got)
	}
	setEnvOverride("ELASTICPS_CAPI_TEST", nil)
	if got, _ := lookupEnv("ELASTICPS_CAPI_TEST"); got != "from-env" {
		t.Fatalf("after removing the override lookupEnv = %q; want the environment's", got)
	}
	if _, ok := lookupEnv("ELASTICPS_CAPI_TEST_UNSET"); ok {
		t.Fatal("an unset variable was found")
	}
}

func TestNodeEnvRoleOverrideAndP3(t *testing.T) {
	t.Setenv("DMLC_ROLE", "worker")
	t.Setenv("DMLC_PS_VAN_TYPE", "p3")
	get := nodeEnv(int(message.RoleServer))
	if v, _ := get("DMLC_ROLE"); v != "server" {
		t.Errorf("DMLC_ROLE = %q; StartPS(SERVER) must override the environment", v)
	}
	if v, _ := nodeEnv(-1)("DMLC_ROLE"); v != "worker" {
		t.Errorf("DMLC_ROLE = %q; without a role the environment's applies", v)
	}
	if v, _ := get("DMLC_PS_VAN_TYPE"); v != "zmq" {
		t.Errorf("DMLC_PS_VAN_TYPE = %q; MXNet's p3 runs on the zmq transport", v)
	}
}

func TestCheckUnsupported(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		role int
		want string // substring of the error; "" for none
	}{
		{"plain", map[string]string{}, int(message.RoleWorker), ""},
		{"group size 1", map[string]string{"DMLC_GROUP_SIZE": "1"}, -1, ""},
		{"group size 2", map[string]string{"DMLC_GROUP_SIZE": "2"}, -1, "DMLC_GROUP_SIZE"},
		{"joint", map[string]string{}, roleJoint, "JOINT"},
		{"rdma zmq", map[string]string{"DMLC_ENABLE_RDMA": "zmq"}, -1, ""},
		{"rdma ibverbs", map[string]string{"DMLC_ENABLE_RDMA": "ibverbs"}, -1, "DMLC_ENABLE_RDMA"},
		{"ucx", map[string]string{"DMLC_ENABLE_UCX": "1"}, -1, "DMLC_ENABLE_UCX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkUnsupported(env(tc.env), tc.role)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one mentioning %s", err, tc.want)
			}
		})
	}
}

type uncomparableError struct{ parts []string }

func (e uncomparableError) Error() string { return strings.Join(e.parts, ",") }

func TestSameError(t *testing.T) {
	a := errors.New("a")
	if !sameError(a, a) {
		t.Error("an error is the same as itself")
	}
	if sameError(a, errors.New("a")) {
		t.Error("distinct errors with the same text are not the same")
	}
	u := uncomparableError{[]string{"x"}}
	if sameError(u, u) {
		t.Error("uncomparable errors must compare false, not panic")
	}
	if sameError(nil, nil) {
		t.Error("nil is not a reported error")
	}
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
	if err != nil || m == nil || f.calls != 3 {
		t.Fatalf("Recv = %v, %v after %d calls; want a message after retrying two EINTRs", m, err, f.calls)
	}
	f = &fakeTransport{results: []error{van.ErrClosed}}
	if _, err := (retryEINTR{f}).Recv(); !errors.Is(err, van.ErrClosed) {
		t.Fatalf("Recv error %v; other errors must pass through", err)
	}
}

// A KVServer's migration handle is never called once the C++ object is
// being deleted, and only a KVServer has one.
func TestMigrationAfterClose(t *testing.T) {
	a := &app{kind: kindServer}
	a.closeMigration()
	if _, err := (cMigrator{a: a}).Export(0, 10); !errors.Is(err, errServerDeleted) {
		t.Fatalf("Export after close: %v; want errServerDeleted", err)
	}
	if err := (cMigrator{a: a}).Import([]byte{1}); !errors.Is(err, errServerDeleted) {
		t.Fatalf("Import after close: %v; want errServerDeleted", err)
	}
	if err := (&app{kind: kindWorker}).setMigration(true); err == nil || !strings.Contains(err.Error(), "only a KVServer") {
		t.Fatalf("setMigration on a KVWorker: %v; want an error naming KVServer", err)
	}
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
		if err != nil || got != tc.want {
			t.Errorf("PS_WAIT_SPIN_US=%q (set %v): %v, %v; want %v", tc.value, tc.set, got, err, tc.want)
		}
	}
	for _, bad := range []string{"-1", "1000001", "ten", "1.5"} {
		_, err := waitSpinFromEnv(env(map[string]string{"PS_WAIT_SPIN_US": bad}))
		if err == nil || !strings.Contains(err.Error(), "PS_WAIT_SPIN_US=\""+bad+"\"") || !strings.Contains(err.Error(), "0 to 1000000") {
			t.Errorf("PS_WAIT_SPIN_US=%q: error %v; want one naming the value and the range", bad, err)
		}
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
	if allocs != 0 {
		t.Fatalf("a waiterWord as a kv.Notifier costs %v allocations, want 0", allocs)
	}
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
		if got := copiedBySend(c.res); got != c.want {
			t.Errorf("%s: copiedBySend = %v, want %v", c.name, got, c.want)
		}
	}
}
