package routing

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSpans(t *testing.T) {
	var s Spans
	s = s.Add(10, 20).Add(30, 40).Add(20, 25).Add(5, 5)
	assert.Equal(t, Spans{{10, 25}, {30, 40}}, s)
	assert.True(t, s.Covers(10, 25))
	assert.True(t, s.Covers(12, 13))
	assert.False(t, s.Covers(10, 26))
	assert.False(t, s.Covers(24, 31))
	assert.Equal(t, Spans{{10, 40}}, s.Add(25, 30))
	assert.Equal(t, Spans{{15, 25}, {30, 32}}, s.Within(Spans{{15, 32}}))
	assert.Empty(t, s.Within(Spans{{0, 10}, {25, 30}}))
	assert.Equal(t, "[10,25) [30,40)", s.String())
	assert.Equal(t, "none", Spans(nil).String())
}

func TestHeld(t *testing.T) {
	r := &Routes{Intervals: []Interval{
		{Begin: 0, End: 10, Node: 8, Backups: []int32{10}},
		{Begin: 10, End: 20, Node: 10, Backups: []int32{8, 12}},
		{Begin: 20, End: 30, Node: 8},
	}}
	assert.Equal(t, map[int32]Spans{8: {{0, 30}}, 10: {{0, 20}}, 12: {{10, 20}}}, Held(r))
}
