// Package testutil holds the helpers that tests across the module share:
// a buffer that processes and goroutines can write to while the test reads
// it, polling for a condition instead of sleeping, receiving with a
// timeout, and catching a helper's test failure to check it.
package testutil

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer that is safe for concurrent use: a job's
// processes, or goroutines that may outlive a test (where t.Log would
// panic), write to it while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns a copy of everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// PollInterval is how often Until and WaitFor check their condition: short
// enough to add little to a test, long enough not to starve the code under
// test on a two-core machine.
const PollInterval = 10 * time.Millisecond

// Until calls cond every PollInterval, on the calling goroutine, until it
// returns true, and reports whether it did within the given time (cond is
// checked once more at the deadline). For code with no testing.TB, such as
// the node programs that a test binary runs as child processes.
func Until(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(PollInterval)
	}
	return true
}

// WaitFor polls cond as Until does and fails t (FailNow) if it does not
// hold within the given time. The failure message is describe's, called at
// that moment, so it can show the state that was waited on (the output so
// far, the events seen). Unlike testify's Eventually, cond runs on the
// test's goroutine and the message is not fixed before the wait.
func WaitFor(t testing.TB, within time.Duration, cond func() bool, describe func() string) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("not within %v: %s", within, describe())
	}
}

// Recv returns the next value from ch, or fails t (FailNow) if none comes
// within the given time, with describe's message called at that moment.
func Recv[T any](t testing.TB, ch <-chan T, within time.Duration, describe func() string) T {
	t.Helper()
	return recv(t, ch, within, "nothing received", describe)
}

func recv[T any](t testing.TB, ch <-chan T, within time.Duration, what string, describe func() string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s within %v: %s", what, within, describe())
		var zero T
		return zero
	}
}

// Within runs f on a new goroutine and returns its result, or fails t
// (FailNow) if f has not returned within the given time, with describe's
// message called at that moment: a lost reply then shows up as a failure,
// not as a test binary that hangs. On a timeout f's goroutine is left
// blocked; what it waits on is usually closed by the test's cleanup.
func Within[T any](t testing.TB, within time.Duration, f func() T, describe func() string) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return recv(t, ch, within, "no return", describe)
}

// Failure is what CatchFailure saw a test helper report.
type Failure struct {
	Failed  bool   // Fail, FailNow, Error(f) or Fatal(f) was called
	Stopped bool   // FailNow or Fatal(f) was called: the helper did not return
	Message string // the messages of Error(f) and Fatal(f), one a line
}

// CatchFailure runs f with a testing.TB whose failures are recorded instead
// of failing t, and returns them, so a test can check that a helper fails
// when it should. As with testing.T, FailNow and Fatal stop f (on its own
// goroutine, with runtime.Goexit); everything else, such as Logf, Helper
// and Cleanup, goes to t.
func CatchFailure(t testing.TB, f func(tb testing.TB)) Failure {
	t.Helper()
	r := &failureRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f
}

// failureRecorder is the testing.TB of CatchFailure. Embedding t's TB
// supplies the unexported method that testing.TB requires.
type failureRecorder struct {
	testing.TB
	mu sync.Mutex
	f  Failure
}

func (r *failureRecorder) record(msg string, stop bool) {
	r.mu.Lock()
	r.f.Failed = true
	if msg != "" {
		r.f.Message += msg + "\n"
	}
	r.f.Stopped = r.f.Stopped || stop
	r.mu.Unlock()
	if stop {
		runtime.Goexit()
	}
}

func (r *failureRecorder) Helper()                        {}
func (r *failureRecorder) Fail()                          { r.record("", false) }
func (r *failureRecorder) FailNow()                       { r.record("", true) }
func (r *failureRecorder) Error(args ...any)              { r.record(fmt.Sprint(args...), false) }
func (r *failureRecorder) Errorf(format string, a ...any) { r.record(fmt.Sprintf(format, a...), false) }
func (r *failureRecorder) Fatal(args ...any)              { r.record(fmt.Sprint(args...), true) }
func (r *failureRecorder) Fatalf(format string, a ...any) { r.record(fmt.Sprintf(format, a...), true) }
func (r *failureRecorder) Failed() bool                   { r.mu.Lock(); defer r.mu.Unlock(); return r.f.Failed }
