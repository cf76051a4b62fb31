package kv

import (
	"errors"
	"fmt"
	"math"
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
	assert.Equal(t, []int32{0, 6, 2, 4, 1, 3, 7, 5}, order, "handled")
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
	require.Equal(t, int32(0), ts, "the first timestamp")
	require.Equal(t, int32(1), c.NewRequest(message.ServerGroup), "the second timestamp")
	c.AddResponse(ts, 1)
	assert.Equal(t, 1, c.NumResponse(ts), "NumResponse")
	done := make(chan error, 1)
	go func() { done <- c.Wait(ts) }()
	select {
	case err := <-done:
		require.Fail(t, "Wait returned early", "%v", err)
	case <-time.After(20 * time.Millisecond):
	}
	resp := msg(0, 0, false)
	resp.Meta.Timestamp = ts
	c.Accept(resp)
	require.NoError(t, <-done)
	assert.Equal(t, 1, handled, "handler runs before Wait returned") // read after Wait: the handler ran before
	assert.NoError(t, c.Wait(ts), "Wait on a completed request")
	assert.Equal(t, -1, c.NumResponse(ts), "NumResponse of a completed request")
	assert.Error(t, c.Wait(99), "Wait on a never issued timestamp")
	// Failures are kept for Wait; successes are forgotten.
	bad := c.NewRequest(message.ServerGroup)
	c.fail(bad, errors.New("boom"))
	c.AddResponse(bad, 2)
	assert.EqualError(t, c.Wait(bad), "boom", "Wait on a failed request")
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
	// not compacted otherwise
	assert.Equal(t, 1, pending, "pending: request 1 is still open")
	assert.Equal(t, maxFailed, failed, "failed")
	assert.Equal(t, maxFailed, order, "order")
	// An empty group completes at once.
	assert.NoError(t, c.Wait(c.NewRequest(message.WorkerGroup|8)), "Wait on a request to nobody")
	// Close releases waiters.
	open := c.NewRequest(message.ServerGroup)
	go func() { time.Sleep(20 * time.Millisecond); c.Close() }()
	assert.ErrorIs(t, c.Wait(open), ErrClosed, "Wait across Close")
}

func TestTrackerStop(t *testing.T) {
	po := newOfflinePostoffice(t)
	c, err := NewCustomer(po, 0, 0, func(*message.Message) {})
	require.NoError(t, err)
	defer c.Close()
	ts := c.NewRequest(message.ServerGroup)
	go func() { time.Sleep(20 * time.Millisecond); po.Stop() }()
	assert.ErrorIs(t, c.Wait(ts), postoffice.ErrStopped, "Wait across Stop")
	_, err = NewCustomer(po, 0, 0, func(*message.Message) {})
	assert.Error(t, err, "a second customer with the same ids")
}

func TestCodec(t *testing.T) {
	keys := []uint64{0, 1, math.MaxUint64, 1 << 40}
	b := KeysToBytes(keys)
	require.Len(t, b, 32)
	require.Equal(t, byte(1), b[8], "keys encode as %v", b)
	require.Equal(t, byte(0xff), b[16], "keys encode as %v", b)
	back, err := BytesToKeys(b)
	require.NoError(t, err)
	require.Equal(t, keys, back, "round trip")
	if littleEndian {
		assert.Same(t, unsafe.SliceData(keys), unsafe.SliceData(back), "aligned decode copied")
	}
	// Unaligned input is decoded through a copy.
	buf := make([]byte, 33)
	copy(buf[1:], b)
	back, err = BytesToKeys(buf[1:])
	require.NoError(t, err, "unaligned round trip")
	require.Equal(t, keys, back, "unaligned round trip")
	_, err = BytesToLens(make([]byte, 7))
	assert.Error(t, err, "7 bytes decoded as int32s")
	lens := []int32{-1, 0, 7}
	got, err := BytesToLens(LensToBytes(lens))
	assert.NoError(t, err)
	assert.Equal(t, lens, got, "lens round trip")
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
		assert.Equal(t, c.want, c.got, "DataTypeOf")
	}
	assert.Zero(t, uintptr(unsafe.Pointer(unsafe.SliceData(alignedBytes(3))))%8, "alignedBytes is not 8-byte aligned")
}

// TestDefaultHandlerApply exercises the store without a network.
func TestDefaultHandlerApply(t *testing.T) {
	h := NewDefaultHandler()
	push := ReqMeta{Push: true, DataType: message.Int32}
	pull := ReqMeta{Pull: true, DataType: message.Int32}
	i32 := func(v ...int32) []byte { return AsBytes(v) }

	// Variable lengths and a repeated key (added once per occurrence).
	_, err := h.apply(push, KVPairs{Keys: []uint64{1, 2, 2}, Vals: i32(1, 10, 20, 10, 20), Lens: []int32{1, 2, 2}})
	require.NoError(t, err)
	res, err := h.apply(pull, KVPairs{Keys: []uint64{1, 2}})
	require.NoError(t, err)
	v, err := FromBytes[int32](res.Vals)
	require.NoError(t, err)
	assert.Equal(t, []int32{1, 20, 40}, v, "pulled")
	assert.Equal(t, []int32{1, 2}, res.Lens, "pulled lens")
	// Uniform values: no lens unless asked.
	res, err = h.apply(pull, KVPairs{Keys: []uint64{2}})
	require.NoError(t, err)
	assert.Nil(t, res.Lens, "lens for a uniform pull")
	// A bad key leaves the whole push unapplied.
	_, err = h.apply(push, KVPairs{Keys: []uint64{1, 2}, Vals: i32(5, 5, 5, 5), Lens: []int32{1, 3}})
	assert.Error(t, err, "push with a length mismatch")
	v1, _, _ := h.Value(1)
	assert.Equal(t, i32(1), v1, "key 1 changed by a rejected push")
	// Types must match; unknown keys fail.
	_, err = h.apply(ReqMeta{Push: true, DataType: message.Float}, KVPairs{Keys: []uint64{1}, Vals: i32(1)})
	assert.Error(t, err, "push of another type")
	_, err = h.apply(pull, KVPairs{Keys: []uint64{3}})
	assert.ErrorContains(t, err, "never pushed", "pull of an unknown key")
	_, err = h.apply(push, KVPairs{Keys: []uint64{4, 5}, Vals: i32(1, 2, 3)})
	assert.Error(t, err, "uneven push")
	_, err = h.apply(push, KVPairs{Keys: []uint64{4, 4}, Vals: i32(1, 2, 3), Lens: []int32{1, 2}})
	assert.Error(t, err, "a new key repeated with two lengths")
	// Integers wrap around; doubles add exactly.
	u8 := ReqMeta{Push: true, Pull: true, DataType: message.Uint8}
	h.apply(u8, KVPairs{Keys: []uint64{9}, Vals: []byte{200}})
	res, err = h.apply(u8, KVPairs{Keys: []uint64{9}, Vals: []byte{100}})
	require.NoError(t, err)
	assert.Equal(t, []byte{44}, res.Vals, "uint8 sum")
	// Unaligned source values are added through the slow path.
	f64 := ReqMeta{Push: true, Pull: true, DataType: message.Double}
	src := make([]byte, 17)
	copy(src[1:], AsBytes([]float64{1.5, 2.25}))
	h.apply(f64, KVPairs{Keys: []uint64{10}, Vals: src[1:]})
	res, _ = h.apply(f64, KVPairs{Keys: []uint64{10}, Vals: src[1:]})
	f, err := FromBytes[float64](res.Vals)
	require.NoError(t, err)
	assert.Equal(t, []float64{3, 4.5}, f, "float64 sum")
	assert.Equal(t, 4, h.Len())
}
