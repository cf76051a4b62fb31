package kv

import (
	"testing"

	"github.com/elasticps/elasticps/routing"
	"github.com/stretchr/testify/assert"
)

// A worker waits for the failover table of a dead server that holds a
// backup copy or is the primary of an interval with a backup to promote,
// and not for one whose intervals have no copy anywhere (nothing comes).
func TestAwaitsFailover(t *testing.T) {
	r := &routing.Routes{Intervals: []routing.Interval{
		{Begin: 0, End: 10, Node: 8, Backups: []int32{10}},
		{Begin: 10, End: 20, Node: 12},
	}}
	assert.True(t, awaitsFailover(r, 8), "primary-only, with a backup to promote")
	assert.True(t, awaitsFailover(r, 10), "holds a backup copy")
	assert.False(t, awaitsFailover(r, 12), "primary of an interval without copies")
	assert.False(t, awaitsFailover(r, 14), "names nothing")
}
