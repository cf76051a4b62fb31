//go:build !rdma || !cgo

package rdma

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Without the rdma tag the package builds everywhere and says how to get
// the real thing.
func TestNotBuilt(t *testing.T) {
	for _, b := range []Backend{Verbs, Fabric} {
		tr, err := New(Config{Backend: b})
		assert.Nil(t, tr, "New(%s)", b)
		assert.ErrorIs(t, err, ErrNotBuilt, "New(%s)", b)
	}
	_, err := New(Config{})
	assert.ErrorContains(t, err, "Backend is empty", "an invalid Config is reported as such")
	assert.EqualError(t, ErrNotBuilt, "van/rdma: built without the rdma tag: rebuild with -tags rdma and libibverbs-dev, librdmacm-dev, libfabric-dev installed")
}
