package kv

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nopTransport lets a Postoffice exist without a network, for tests of the
// customer alone.
type nopTransport struct{ closed chan struct{} }

func (nopTransport) Bind(message.Node, int) (int, error) { return 0, errors.New("no network") }
func (nopTransport) Connect(message.Node, int32) error   { return errors.New("no network") }
func (nopTransport) Send(*message.Message) (int, error)  { return 0, errors.New("no network") }
func (nopTransport) Release(*message.Message)            {}
func (nopTransport) Detach(*message.Message)             {}
func (t nopTransport) Recv() (*message.Message, error)   { <-t.closed; return nil, errors.New("closed") }
func (t nopTransport) Close() error                      { return nil }
func newOfflinePostoffice(t *testing.T) *postoffice.Postoffice {
	t.Helper()
	po, err := postoffice.New(postoffice.Config{
		Role: message.RoleWorker, NumWorkers: 1, NumServers: 2,
		SchedulerHost: "127.0.0.1", SchedulerPort: 1, Logger: jobtest.Logger(),
	}, nopTransport{closed: make(chan struct{})})
	require.NoError(t, err)
	t.Cleanup(po.Stop)
	return po
}

func msg(head, prio int32, request bool) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Head, m.Meta.Priority, m.Meta.Request = head, prio, request
	return m
}

// TestCustomerQueueOrder: higher priority first, FIFO among equals.
func TestCustomerQueueOrder(t *testing.T) {
	po := newOfflinePostoffice(t)
	release := make(chan struct{})
	got := make(chan int32, 16)
	c, err := NewCustomer(po, 0, 0, func(m *message.Message) {
		if m.Meta.Head == 0 {
			<-release // hold the goroutine while the rest queue up
		}
		got <- m.Meta.Head
	})
	require.NoError(t, err)
	defer c.Close()
	c.Accept(msg(0, 0, true))
	time.Sleep(10 * time.Millisecond)
	for _, hp := range [][2]int32{{1, 0}, {2, 5}, {3, 0}, {4, 5}, {5, -1}, {6, 10}, {7, 0}} {
		c.Accept(msg(hp[0], hp[1], true))
	}
	close(release)
	var order []int32
	for range 8 {
		order = append(order, testutil.Recv(t, got, 5*time.Second, func() string { return fmt.Sprintf("handled only %v", order) }))
	}
	if want := []int32{0, 6, 2, 4, 1, 3, 7, 5}; !slices.Equal(order, want) {
		t.Errorf("handled %v, want %v", order, want)
	}
}

// TestTracker: expected counts from the group, responses counted after the
// handler, completed entries compacted, Wait on a completed timestamp
// immediate, failures kept for Wait, Close and Stop release waiters.
func TestTracker(t *testing.T) {
	po := newOfflinePostoffice(t)
	handled := 0
	c, err := NewCustomer(po, 0, 0, func(*message.Message) { handled++ })
	require.NoError(t, err)
	ts := c.NewRequest(message.ServerGroup) // two servers
	if ts != 0 || c.NewRequest(message.ServerGroup) != 1 {
		t.Fatalf("timestamps do not start at 0")
	}
	c.AddResponse(ts, 1)
	if n := c.NumResponse(ts); n != 1 {
		t.Errorf("NumResponse=%d, want 1", n)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait(ts) }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned early: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	resp := msg(0, 0, false)
	resp.Meta.Timestamp = ts
	c.Accept(resp)
	require.NoError(t, <-done)
	if handled != 1 { // read after Wait: the handler ran before
		t.Errorf("handler ran %d times before Wait returned", handled)
	}
	assert.NoError(t, c.Wait(ts), "Wait on a completed request")
	if n := c.NumResponse(ts); n != -1 {
		t.Errorf("NumResponse of a completed request = %d, want -1", n)
	}
	if err := c.Wait(99); err == nil {
		t.Error("Wait on a never issued timestamp succeeded")
	}
	// Failures are kept for Wait; successes are forgotten.
	bad := c.NewRequest(message.ServerGroup)
	c.fail(bad, errors.New("boom"))
	c.AddResponse(bad, 2)
	if err := c.Wait(bad); err == nil || err.Error() != "boom" {
		t.Errorf("Wait on a failed request: %v", err)
	}
	for range 10000 {
		c.AddResponse(c.NewRequest(message.ServerGroup), 2)
	}
	for range 2 * maxFailed {
		ts := c.NewRequest(message.ServerGroup)
		c.fail(ts, errors.New("x"))
		c.AddResponse(ts, 2)
	}
	c.tmu.Lock()
	pending, failed, order := len(c.pending), len(c.failed), len(c.order)
	c.tmu.Unlock()
	if pending != 1 || failed != maxFailed || order != maxFailed { // request 1 is still open
		t.Errorf("tracker holds %d pending, %d failed (%d order): not compacted", pending, failed, order)
	}
	// An empty group completes at once.
	assert.NoError(t, c.Wait(c.NewRequest(message.WorkerGroup|8)), "Wait on a request to nobody")
	// Close releases waiters.
	open := c.NewRequest(message.ServerGroup)
	go func() { time.Sleep(20 * time.Millisecond); c.Close() }()
	if err := c.Wait(open); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait across Close: %v", err)
	}
}

func TestTrackerStop(t *testing.T) {
	po := newOfflinePostoffice(t)
	c, err := NewCustomer(po, 0, 0, func(*message.Message) {})
	require.NoError(t, err)
	defer c.Close()
	ts := c.NewRequest(message.ServerGroup)
	go func() { time.Sleep(20 * time.Millisecond); po.Stop() }()
	if err := c.Wait(ts); !errors.Is(err, postoffice.ErrStopped) {
		t.Errorf("Wait across Stop: %v", err)
	}
	if _, err := NewCustomer(po, 0, 0, func(*message.Message) {}); err == nil {
		t.Error("a second customer with the same ids was accepted")
	}
}

func TestCodec(t *testing.T) {
	keys := []uint64{0, 1, math.MaxUint64, 1 << 40}
	b := KeysToBytes(keys)
	if len(b) != 32 || b[8] != 1 || b[16] != 0xff {
		t.Fatalf("keys encode as %v", b)
	}
	back, err := BytesToKeys(b)
	if err != nil || !slices.Equal(back, keys) {
		t.Fatalf("round trip: %v %v", back, err)
	}
	if littleEndian && unsafe.SliceData(back) != unsafe.SliceData(keys) {
		t.Error("aligned decode copied")
	}
	// Unaligned input is decoded through a copy.
	buf := make([]byte, 33)
	copy(buf[1:], b)
	back, err = BytesToKeys(buf[1:])
	if err != nil || !slices.Equal(back, keys) {
		t.Fatalf("unaligned round trip: %v %v", back, err)
	}
	if _, err := BytesToLens(make([]byte, 7)); err == nil {
		t.Error("7 bytes decoded as int32s")
	}
	lens := []int32{-1, 0, 7}
	if got, _ := BytesToLens(LensToBytes(lens)); !slices.Equal(got, lens) {
		t.Errorf("lens round trip: %v", got)
	}
	type myFloat float32
	for _, c := range []struct {
		got, want message.DataType
	}{
		{DataTypeOf[float32](), message.Float}, {DataTypeOf[float64](), message.Double},
		{DataTypeOf[int8](), message.Int8}, {DataTypeOf[uint8](), message.Uint8},
		{DataTypeOf[int16](), message.Int16}, {DataTypeOf[uint16](), message.Uint16},
		{DataTypeOf[int32](), message.Int32}, {DataTypeOf[uint32](), message.Uint32},
		{DataTypeOf[int64](), message.Int64}, {DataTypeOf[uint64](), message.Uint64},
		{DataTypeOf[myFloat](), message.Float},
	} {
		if c.got != c.want {
			t.Errorf("DataTypeOf: %s, want %s", c.got, c.want)
		}
	}
	if p := unsafe.SliceData(alignedBytes(3)); uintptr(unsafe.Pointer(p))%8 != 0 {
		t.Error("alignedBytes is not 8-byte aligned")
	}
}

// TestDefaultHandlerApply exercises the store without a network.
func TestDefaultHandlerApply(t *testing.T) {
	h := NewDefaultHandler()
	push := ReqMeta{Push: true, DataType: message.Int32}
	pull := ReqMeta{Pull: true, DataType: message.Int32}
	i32 := func(v ...int32) []byte { return AsBytes(v) }

	// Variable lengths and a repeated key (added once per occurrence).
	if _, err := h.apply(push, KVPairs{Keys: []uint64{1, 2, 2}, Vals: i32(1, 10, 20, 10, 20), Lens: []int32{1, 2, 2}}); err != nil {
		t.Fatal(err)
	}
	res, err := h.apply(pull, KVPairs{Keys: []uint64{1, 2}})
	require.NoError(t, err)
	if v, _ := FromBytes[int32](res.Vals); !slices.Equal(v, []int32{1, 20, 40}) || !slices.Equal(res.Lens, []int32{1, 2}) {
		t.Errorf("pulled %v lens %v", v, res.Lens)
	}
	// Uniform values: no lens unless asked.
	if res, _ := h.apply(pull, KVPairs{Keys: []uint64{2}}); res.Lens != nil {
		t.Errorf("lens %v for a uniform pull", res.Lens)
	}
	// A bad key leaves the whole push unapplied.
	if _, err := h.apply(push, KVPairs{Keys: []uint64{1, 2}, Vals: i32(5, 5, 5, 5), Lens: []int32{1, 3}}); err == nil {
		t.Error("push with a length mismatch accepted")
	}
	if v, _, _ := h.Value(1); !slices.Equal(v, i32(1)) {
		t.Errorf("key 1 changed by a rejected push: %v", v)
	}
	// Types must match; unknown keys fail.
	if _, err := h.apply(ReqMeta{Push: true, DataType: message.Float}, KVPairs{Keys: []uint64{1}, Vals: i32(1)}); err == nil {
		t.Error("push of another type accepted")
	}
	if _, err := h.apply(pull, KVPairs{Keys: []uint64{3}}); err == nil || !strings.Contains(err.Error(), "never pushed") {
		t.Errorf("pull of an unknown key: %v", err)
	}
	if _, err := h.apply(push, KVPairs{Keys: []uint64{4, 5}, Vals: i32(1, 2, 3)}); err == nil {
		t.Error("uneven push accepted")
	}
	if _, err := h.apply(push, KVPairs{Keys: []uint64{4, 4}, Vals: i32(1, 2, 3), Lens: []int32{1, 2}}); err == nil {
		t.Error("a new key repeated with two lengths accepted")
	}
	// Integers wrap around; doubles add exactly.
	u8 := ReqMeta{Push: true, Pull: true, DataType: message.Uint8}
	h.apply(u8, KVPairs{Keys: []uint64{9}, Vals: []byte{200}})
	if res, _ := h.apply(u8, KVPairs{Keys: []uint64{9}, Vals: []byte{100}}); !slices.Equal(res.Vals, []byte{44}) {
		t.Errorf("uint8 sum %v", res.Vals)
	}
	// Unaligned source values are added through the slow path.
	f64 := ReqMeta{Push: true, Pull: true, DataType: message.Double}
	src := make([]byte, 17)
	copy(src[1:], AsBytes([]float64{1.5, 2.25}))
	h.apply(f64, KVPairs{Keys: []uint64{10}, Vals: src[1:]})
	res, _ = h.apply(f64, KVPairs{Keys: []uint64{10}, Vals: src[1:]})
	if v, _ := FromBytes[float64](res.Vals); !slices.Equal(v, []float64{3, 4.5}) {
		t.Errorf("float64 sum %v", v)
	}
	if h.Len() != 4 {
		t.Errorf("Len()=%d, want 4", h.Len())
	}
}
