package bufpool

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGetPut(t *testing.T) {
	b := Get(Min + 1)
	assert.Len(t, b, Min+1)
	assert.Equal(t, 2*Min, cap(b), "capacity is the size class")
	Put(b)
	Put(make([]byte, 100))          // too small: ignored
	Put(make([]byte, Min+1, Min+3)) // not a size class: ignored
	c := Get(2 * Min)
	assert.Len(t, c, 2*Min)
	assert.Equal(t, 2*Min, cap(c))
}
