//go:build rdma && cgo

package rdma

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

// factory runs the shared van conformance suite over the fabric backend.
// Raw messages are images written by a second transport straight into a
// slot the receiver granted, bypassing every check of Send.
var factory = vantest.Factory{
	New: func(t testing.TB, opt van.Options) van.Transport {
		cfg := fabricConfig()
		cfg.Limits = opt.Limits
		tr, err := New(cfg)
		require.NoError(t, err)
		return tr
	},
	Raw: func(t testing.TB, to message.Node, id int32) func(frames ...[]byte) {
		tr, err := New(fabricConfig())
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, tr.Close()) })
		require.NoError(t, tr.Connect(to, id))
		return func(frames ...[]byte) { rawSend(t, tr, to.ID, frames) }
	},
	GarbageReported: false, // the bootstrap listener logs and counts it (see TestGarbageOnBootstrapPort)
}

// rawSend writes frames (meta first) as one image to node id.
func rawSend(t testing.TB, tr *Transport, id int32, frames [][]byte) {
	l, err := tr.linkTo(id)
	require.NoError(t, err)
	total := hdrSize + 8*(len(frames)-1)
	for _, f := range frames {
		total += len(f)
	}
	pl := &sendPlan{}
	pl.hdr.link = l.remote
	target, err := tr.rendezvous(l, pl, total)
	if err != nil {
		// The receiver refused the size: it reports that itself.
		require.ErrorContains(t, err, "refuses")
		return
	}
	tr.mu.Lock()
	buf, err := tr.pool.get(total)
	tr.mu.Unlock()
	require.NoError(t, err)
	b := buf.bytes()
	pl.hdr.metaLen, pl.hdr.nframes, pl.hdr.total = uint32(len(frames[0])), uint32(len(frames)-1), uint64(total)
	pl.hdr.put(b)
	off := hdrSize
	for _, f := range frames[1:] {
		binary.LittleEndian.PutUint64(b[off:], uint64(len(f)))
		off += 8
	}
	for _, f := range frames {
		off += copy(b[off:], f)
	}
	o := &op{link: l, buf: buf}
	require.NoError(t, tr.post(l, o, []sge{{addr: uintptr(buf.p), len: uint64(total), desc: buf.mr.desc}}, target))
}

func TestConformance(t *testing.T) { vantest.Run(t, factory) }

func BenchmarkConformanceRoundTrip(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(vantest.SizeName(size), func(b *testing.B) { vantest.BenchRoundTrip(b, factory, size, false) })
	}
}
