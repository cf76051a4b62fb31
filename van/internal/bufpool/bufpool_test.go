package bufpool

import "testing"

func TestGetPut(t *testing.T) {
	b := Get(Min + 1)
	if len(b) != Min+1 || cap(b) != 2*Min {
		t.Fatalf("len %d cap %d, want %d and %d", len(b), cap(b), Min+1, 2*Min)
	}
	Put(b)
	Put(make([]byte, 100))          // too small: ignored
	Put(make([]byte, Min+1, Min+3)) // not a size class: ignored
	c := Get(2 * Min)
	if len(c) != 2*Min || cap(c) != 2*Min {
		t.Fatalf("len %d cap %d", len(c), cap(c))
	}
}
