package recvmsg

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

func TestOfRecognisesOnlyItsOwn(t *testing.T) {
	im := Get()
	msg := im.Message()
	msg.Meta.DataType = append(msg.Meta.DataType, message.Uint64, message.Float)
	assert.Same(t, im, Of(msg), "a message from Get")
	built := &message.Message{Meta: message.NewMeta()}
	built.AddData(message.Uint64, []byte{1})
	assert.Nil(t, Of(built), "a message built by hand")
	copied := *msg
	assert.Nil(t, Of(&copied), "a copy of a pooled message")
	Put(im)
	assert.Nil(t, Of(msg), "a message already put back")
}

// TestPutTwiceIsRefused checks that a Msg put back twice is not pooled
// twice (two receivers would fill it at once) and that the second Put is
// counted.
func TestPutTwiceIsRefused(t *testing.T) {
	before := Misuses()
	im := Get()
	Put(im)
	Put(im)
	assert.Equal(t, int64(1), Misuses()-before, "misuses counted")
	a, b := Get(), Get()
	assert.NotSame(t, a, b, "the pool handed out the same Msg twice")
	Put(a)
	Put(b)
	assert.Equal(t, int64(1), Misuses()-before, "misuses counted after good Puts")
}

func TestSmallReusesItsBuffer(t *testing.T) {
	im := Get()
	b := im.Small(100)
	require.Len(t, b, 100)
	assert.GreaterOrEqual(t, cap(b), 100)
	c := im.Small(60)
	assert.Same(t, &b[0], &c[0], "Small reuses a big enough buffer")
	im.DropSmall()
	assert.Nil(t, im.SmallBuf(), "DropSmall forgets the buffer")
	Put(im)
}
