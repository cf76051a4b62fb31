package recvmsg

import (
	"testing"

	"github.com/elasticps/elasticps/message"
)

func TestOfRecognisesOnlyItsOwn(t *testing.T) {
	im := Get()
	msg := im.Message()
	msg.Meta.DataType = append(msg.Meta.DataType, message.Uint64, message.Float)
	if Of(msg) != im {
		t.Fatal("Of does not recognise a message from Get")
	}
	built := &message.Message{Meta: message.NewMeta()}
	built.AddData(message.Uint64, []byte{1})
	if Of(built) != nil {
		t.Fatal("Of recognises a message built by hand")
	}
	copied := *msg
	if Of(&copied) != nil {
		t.Fatal("Of recognises a copy of a pooled message")
	}
	Put(im)
	if Of(msg) != nil {
		t.Fatal("Of recognises a message already put back")
	}
}

// TestPutTwiceIsRefused checks that a Msg put back twice is not pooled
// twice (two receivers would fill it at once) and that the second Put is
// counted.
func TestPutTwiceIsRefused(t *testing.T) {
	before := Misuses()
	im := Get()
	Put(im)
	Put(im)
	if got := Misuses() - before; got != 1 {
		t.Fatalf("misuses counted %d, want 1", got)
	}
	a, b := Get(), Get()
	if a == b {
		t.Fatal("the pool handed out the same Msg twice")
	}
	Put(a)
	Put(b)
	if got := Misuses() - before; got != 1 {
		t.Fatalf("misuses counted %d after good Puts, want still 1", got)
	}
}

func TestSmallReusesItsBuffer(t *testing.T) {
	im := Get()
	b := im.Small(100)
	if len(b) != 100 || cap(b) < 100 {
		t.Fatalf("Small(100): len %d cap %d", len(b), cap(b))
	}
	if c := im.Small(60); &c[0] != &b[0] {
		t.Fatal("Small did not reuse a big enough buffer")
	}
	im.DropSmall()
	if im.SmallBuf() != nil {
		t.Fatal("DropSmall kept the buffer")
	}
	Put(im)
}
