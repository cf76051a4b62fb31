package testutil

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSyncBufferConcurrentWrites(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 100 {
				_, err := fmt.Fprintf(&b, "%d\n", i)
				assert.NoError(t, err)
				_ = b.String() // read while the others write: -race checks it
			}
		})
	}
	wg.Wait()
	out := b.String()
	assert.Equal(t, 400, strings.Count(out, "\n"))
	for i := range 4 {
		assert.Equal(t, 100, strings.Count(out, fmt.Sprintf("%d\n", i)), "lines of writer %d", i)
	}
}

func TestUntil(t *testing.T) {
	calls := 0
	assert.True(t, Until(time.Second, func() bool { calls++; return calls == 3 }))
	assert.Equal(t, 3, calls)

	start := time.Now()
	calls = 0
	assert.False(t, Until(50*time.Millisecond, func() bool { calls++; return false }))
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	assert.Greater(t, calls, 1, "cond must be polled, not called once")
}

func TestWaitFor(t *testing.T) {
	n := 0
	f := CatchFailure(t, func(tb testing.TB) {
		WaitFor(tb, time.Second, func() bool { n++; return n >= 2 }, func() string { return "never" })
	})
	assert.Equal(t, Failure{}, f)

	state := "before"
	f = CatchFailure(t, func(tb testing.TB) {
		WaitFor(tb, 30*time.Millisecond, func() bool { state = "after"; return false }, func() string { return "state " + state })
		tb.Error("WaitFor returned") // must not be reached
	})
	assert.Equal(t, Failure{Failed: true, Stopped: true, Message: "not within 30ms: state after\n"}, f,
		"describe must run at the deadline, and WaitFor must stop the test")
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	var got int
	f := CatchFailure(t, func(tb testing.TB) { got = Recv(tb, ch, time.Second, func() string { return "no value" }) })
	assert.Equal(t, Failure{}, f)
	assert.Equal(t, 7, got)

	f = CatchFailure(t, func(tb testing.TB) {
		Recv(tb, ch, 20*time.Millisecond, func() string { return "Run did not return" })
		tb.Error("Recv returned")
	})
	assert.Equal(t, Failure{Failed: true, Stopped: true, Message: "nothing received within 20ms: Run did not return\n"}, f)
}

func TestWithin(t *testing.T) {
	var got error
	f := CatchFailure(t, func(tb testing.TB) {
		got = Within(tb, time.Second, func() error { return errors.New("done") }, func() string { return "no return" })
	})
	assert.Equal(t, Failure{}, f)
	assert.EqualError(t, got, "done")

	block := make(chan struct{})
	defer close(block) // lets the blocked goroutine end
	f = CatchFailure(t, func(tb testing.TB) {
		Within(tb, 20*time.Millisecond, func() int { <-block; return 1 }, func() string { return "Wait did not return" })
		tb.Error("Within returned")
	})
	assert.Equal(t, Failure{Failed: true, Stopped: true, Message: "no return within 20ms: Wait did not return\n"}, f)
}

func TestCatchFailure(t *testing.T) {
	f := CatchFailure(t, func(tb testing.TB) {
		tb.Errorf("first %d", 1)
		tb.Error("second")
		assert.True(t, tb.Failed(), "Failed after Error")
	})
	assert.Equal(t, Failure{Failed: true, Message: "first 1\nsecond\n"}, f)

	f = CatchFailure(t, func(tb testing.TB) { require.Equal(tb, 1, 2) })
	assert.True(t, f.Failed)
	assert.True(t, f.Stopped, "require stops the helper")
	assert.Contains(t, f.Message, "Not equal")

	f = CatchFailure(t, func(tb testing.TB) { tb.Fail() })
	assert.Equal(t, Failure{Failed: true}, f)
	require.False(t, t.Failed(), "the recorded failures must not fail t")
}
