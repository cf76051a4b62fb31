//go:build !race

package memvan

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elasticps/elasticps/van/vantest"
)

func TestRoundTripAllocsDoNotGrowWithSize(t *testing.T) {
	// Five per message whatever its size: Send's encoded meta, frame list
	// and one copy of the data; Recv's Message and its decoded data_type.
	f := newFactory()
	for _, size := range []int{100, 4 << 10, 256 << 10} {
		assert.Equal(t, 10.0, vantest.RoundTripAllocs(t, f, size), "allocations per round trip of %d value bytes", size)
	}
}
