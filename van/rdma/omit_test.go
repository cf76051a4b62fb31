//go:build !rdma || !cgo

package rdma

import (
	"errors"
	"testing"
)

// Without the rdma tag the package builds everywhere and says how to get
// the real thing.
func TestNotBuilt(t *testing.T) {
	for _, b := range []Backend{Verbs, Fabric} {
		tr, err := New(Config{Backend: b})
		if tr != nil || !errors.Is(err, ErrNotBuilt) {
			t.Fatalf("New(%s) = %v, %v; want ErrNotBuilt", b, tr, err)
		}
	}
	if _, err := New(Config{}); err == nil || errors.Is(err, ErrNotBuilt) {
		t.Fatalf("an invalid Config is reported as such, got %v", err)
	}
	const want = "van/rdma: built without the rdma tag: rebuild with -tags rdma and libibverbs-dev, librdmacm-dev, libfabric-dev installed"
	if ErrNotBuilt.Error() != want {
		t.Fatalf("ErrNotBuilt = %q", ErrNotBuilt)
	}
}
