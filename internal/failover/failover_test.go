package failover

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

const failoverLine = `level=WARN msg="coord: failover" role=scheduler dead=12 promoted=2 lost=0 epoch=5 routes="[0,6148914691236517205)->14[18] [6148914691236517205,12297829382473034410)->14[20] [12297829382473034410,18446744073709551615)->18[20] " took=2ms`

func TestRoutesOfACoordinatorLine(t *testing.T) {
	assert.Equal(t, []int{18, 20}, holders(failoverLine), "servers holding a backup copy")
	assert.Equal(t, []string{"0/18", "6148914691236517205/20", "12297829382473034410/20"}, copies(failoverLine))
	assert.Empty(t, holders("no routes"))
}

func TestValidate(t *testing.T) {
	assert.NoError(t, (&Config{Kills: 20, Sizes: []int{1 << 20}, Duration: 1, Depth: 4}).Validate())
	assert.NoError(t, (&Config{Kills: 20, Depth: 1}).Validate(), "failover times only")
	assert.ErrorContains(t, (&Config{Depth: 1}).Validate(), "something must be measured")
	assert.ErrorContains(t, (&Config{Sizes: []int{1}, Depth: 1}).Validate(), "--duration must be positive")
	assert.ErrorContains(t, (&Config{Kills: 1, Depth: 1, SyncWorkers: -1}).Validate(), "--sync-workers must be >= 0")
	assert.Equal(t, "4MB", sizeLabel(4<<20))
	assert.Equal(t, "1000B", sizeLabel(1000))
}
