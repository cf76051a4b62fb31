package straggler

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The plot's headline: elastic against static and the oracle, with the
// straggler; nothing without an elastic straggler row.
func TestHeadline(t *testing.T) {
	rows := []*tableRow{
		{Placement: "static", Straggler: "bandwidth", ItPerSec: 1, SpeedUp: 1},
		{Placement: "elastic", Straggler: "none", ItPerSec: 3, SpeedUp: 1},
		{Placement: "elastic", Straggler: "bandwidth", ItPerSec: 2.75, SpeedUp: 2.75, VsOracle: 0.9375},
	}
	assert.Equal(t, "elastic 2.8x static, 94% of the oracle (bandwidth straggler, 2.75 it/s per worker)", headline(rows))
	rows[2].VsOracle = 0
	assert.Equal(t, "elastic 2.8x static (bandwidth straggler, 2.75 it/s per worker)", headline(rows))
	assert.Equal(t, "", headline(rows[:2]))
}
