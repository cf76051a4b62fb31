package message_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

func encodeRaw(t testing.TB, m *message.Meta) []byte {
	t.Helper()
	b, err := message.EncodeRawMeta(m)
	require.NoError(t, err)
	require.Len(t, b, m.RawEncodedLen(), "RawEncodedLen")
	return b
}

func decodeRaw(t testing.TB, b []byte) message.Meta {
	t.Helper()
	var m message.Meta
	require.NoError(t, message.DecodeRawMeta(b, &m), "DecodeRawMeta(%x)", b)
	return m
}

// The fields only elasticps uses travel in bytes the fork zeroes and never
// reads, and a meta without them has exactly the fork's bytes there.
func TestRawMetaElasticpsFields(t *testing.T) {
	kv := kvPushMeta()
	kv.Raw = message.RawFields{SrcDevType: 1, DstDevType: 1, Key: 7, Addr: 0xdead, ValLen: 64}
	plain := encodeRaw(t, &kv)
	require.Len(t, plain, message.RawMetaSize+4*3, "a KV meta is 112+4*n_dtype bytes")
	assert.Equal(t, byte(0), plain[70], "flags byte of a plain push")
	assert.Equal(t, []byte{0, 0, 0, 0}, plain[108:112], "priority bytes of a plain push")
	back := decodeRaw(t, plain)
	assert.True(t, metaEqual(&kv, &back), "got %s\nwant %s", dump(&back), dump(&kv))

	tests := []struct {
		name   string
		change func(*message.Meta)
		grows  int
	}{
		{"push-pull", func(m *message.Meta) { m.Pull = true }, 0},
		{"neither push nor pull", func(m *message.Meta) { m.Push = false }, 0},
		{"priority", func(m *message.Meta) { m.Priority = -3 }, 0},
		{"extensions", func(m *message.Meta) {
			m.Ext = message.Ext{Epoch: 2, SendNanos: -5, RecvNanos: 6, HandleNano: 7, PushSeq: 8, Iteration: 9, Redirect: true}
		}, 56},
		{"standby node", func(m *message.Meta) {
			m.Control = message.Control{Cmd: message.CmdAddNode, Nodes: []message.Node{
				{Role: message.RoleServer, ID: 8, Hostname: "h", Port: 1},
				{Role: message.RoleServer, ID: 10, Hostname: "h", Port: 2, Standby: true},
			}}
			m.Pull = false
		}, 2*message.RawNodeSize + 56 + 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := kvPushMeta()
			tc.change(&m)
			b := encodeRaw(t, &m)
			assert.Len(t, b, len(plain)+tc.grows)
			got := decodeRaw(t, b)
			assert.True(t, metaEqual(&m, &got), "got %s\nwant %s", dump(&got), dump(&m))
		})
	}
}

// The fork's kEmpty is 32767; in control messages it is our Empty, in data
// messages a plain value (a timestamp passes 32767 in a long job).
func TestRawMetaEmpty(t *testing.T) {
	term := message.NewMeta()
	term.Control.Cmd = message.CmdTerminate
	b := encodeRaw(t, &term)
	for _, off := range []int{0, 36, 40, 64} {
		assert.Equal(t, uint32(32767), binary.LittleEndian.Uint32(b[off:]), "offset %d", off)
	}
	got := decodeRaw(t, b)
	assert.True(t, metaEqual(&term, &got), "got %s\nwant %s", dump(&got), dump(&term))

	kv := kvPushMeta()
	kv.Timestamp, kv.Head = 32767, 32767
	got = decodeRaw(t, encodeRaw(t, &kv))
	assert.Equal(t, int32(32767), got.Timestamp)
	assert.Equal(t, int32(32767), got.Head)
}

func TestRawMetaEncodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, host, want string
	}{
		{"long hostname", strings.Repeat("h", 64), "at most 63"},
		{"NUL in hostname", "a\x00b", "NUL"},
	} {
		m := addNodeMeta()
		m.Control.Nodes[1].Hostname = tc.host
		_, err := message.EncodeRawMeta(&m)
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), "control.node[1].hostname", tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
		dst := []byte("x")
		out, err := m.AppendRaw(dst)
		assert.Error(t, err)
		assert.Equal(t, []byte("x"), out, "%s: a failed AppendRaw appends nothing", tc.name)
	}
	m := addNodeMeta()
	m.Control.Nodes = make([]message.Node, message.MaxNodes+1)
	_, err := message.EncodeRawMeta(&m)
	assert.ErrorContains(t, err, "nodes")
}

func TestRawMetaDecodeErrors(t *testing.T) {
	an := addNodeMeta()
	good := encodeRaw(t, &an) // 112 + 2 nodes
	node1 := message.RawMetaSize + message.RawNodeSize
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	put := func(off int, v uint32) func([]byte) {
		return func(b []byte) { binary.LittleEndian.PutUint32(b[off:], v) }
	}
	tests := []struct {
		name   string
		frame  []byte
		offset int
		want   string
	}{
		{"empty", nil, 0, "shorter than the fork's 112-byte RawMeta"},
		{"short", good[:111], 111, "shorter"},
		{"truncated node", good[:len(good)-1], len(good) - 1, "node_size=2"},
		{"trailing byte", append(append([]byte(nil), good...), 0), len(good), "make 1216"},
		{"negative body_size", mod(put(4, 0xffffffff)), 4, "body_size"},
		{"body_size past the end", mod(put(4, 1<<30)), len(good), "body_size=1073741824"},
		{"negative node_size", mod(put(12, 0xfffffffe)), 12, "control.node_size"},
		{"huge node_size", mod(put(12, message.MaxNodes+1)), 12, "control.node_size"},
		{"huge data_type_size", mod(put(44, 1<<30)), 44, "data_type_size"},
		{"bad request bool", mod(func(b []byte) { b[32] = 2 }), 32, "request: bool byte is 2"},
		{"bad push bool", mod(func(b []byte) { b[68] = 0xff }), 68, "push"},
		{"bad simple_app bool", mod(func(b []byte) { b[69] = 7 }), 69, "simple_app"},
		{"unknown flag", mod(func(b []byte) { b[70] = 0x10 }), 70, "unknown elasticps flags"},
		{"pull value without pull-set", mod(func(b []byte) { b[70] = 0x02 }), 70, "pull value flag"},
		{"trailer flag without trailer", mod(func(b []byte) { b[70] = 0x04 }), len(good), "trailer=true"},
		{"hostname without NUL", mod(func(b []byte) {
			copy(b[node1+8:node1+72], strings.Repeat("x", 64))
		}), node1 + 8, "control.node[1].hostname"},
		{"num_ports", mod(put(node1+72, 33)), node1 + 72, "control.node[1].num_ports"},
		{"is_recovery", mod(func(b []byte) { b[node1+464] = 3 }), node1 + 464, "control.node[1].is_recovery"},
		{"endpoint_name_len", mod(put(node1+536, 65)), node1 + 536, "endpoint_name_len"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := addNodeMeta()
			err := message.DecodeRawMeta(tc.frame, &m)
			var de *message.DecodeError
			require.ErrorAs(t, err, &de)
			assert.Equal(t, tc.offset, de.Offset, "offset; error: %v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	kv := kvPushMeta()
	kv.Ext.Epoch = 1
	ext := encodeRaw(t, &kv)
	tail := len(ext) - 56
	for name, f := range map[string]func([]byte){
		"redirect":        func(b []byte) { b[tail+48] = 2 },
		"trailer padding": func(b []byte) { b[tail+50] = 1 },
	} {
		b := append([]byte(nil), ext...)
		f(b)
		var m message.Meta
		assert.ErrorContains(t, message.DecodeRawMeta(b, &m), "trailer", name)
	}
	an.Control.Nodes[0].Standby = true
	sb := encodeRaw(t, &an)
	sb[len(sb)-2] = 9
	var m message.Meta
	assert.ErrorContains(t, message.DecodeRawMeta(sb, &m), "trailer.standby[0]")
}

// Every damaged golden frame (each byte flipped, each prefix) yields a meta
// or an error, never a panic.
func TestRawMetaNoPanicOnDamage(t *testing.T) {
	var frames [][]byte
	for _, r := range loadRawGolden(t) {
		if len(r.meta) <= 1768 { // the 4-node lists add nothing new
			frames = append(frames, r.meta)
		}
	}
	var m message.Meta
	for _, f := range frames[:40] {
		b := append([]byte(nil), f...)
		for i := range b {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				b[i] ^= x
				_ = message.DecodeRawMeta(b, &m)
				b[i] ^= x
			}
			_ = message.DecodeRawMeta(b[:i], &m)
		}
	}
}

func TestRawMetaCopiesInput(t *testing.T) {
	m := addNodeMeta()
	m.Body = []byte("payload")
	frame := encodeRaw(t, &m)
	got := decodeRaw(t, frame)
	clear(frame)
	assert.Equal(t, "payload", string(got.Body))
	assert.Equal(t, "10.0.0.2", got.Control.Nodes[1].Hostname)
}

func TestAppendRawAppends(t *testing.T) {
	m := kvPushMeta()
	want := encodeRaw(t, &m)
	out, err := m.AppendRaw([]byte("prefix"))
	require.NoError(t, err)
	assert.Equal(t, append([]byte("prefix"), want...), out)
}

// The hot path (a KV meta into a reused Meta and a reused buffer) does not
// allocate; neither do heartbeats, whose hostname is kept when unchanged.
func TestRawMetaCodecAllocs(t *testing.T) {
	kv := kvPushMeta()
	kv.Ext = message.Ext{Epoch: 3, SendNanos: 1700000000123456789, PushSeq: 17}
	frame := encodeRaw(t, &kv)
	hb := message.NewMeta()
	hb.Control = message.Control{Cmd: message.CmdHeartbeat, Nodes: []message.Node{{Role: message.RoleWorker, ID: 9, Hostname: "10.0.0.2", Port: 9001}}}
	hbFrame := encodeRaw(t, &hb)
	var m, h message.Meta
	require.NoError(t, message.DecodeRawMeta(frame, &m))
	require.NoError(t, message.DecodeRawMeta(hbFrame, &h))
	buf := make([]byte, 0, 4096)
	var err error
	for name, f := range map[string]func(){
		"DecodeRawMeta of a KV meta into a reused Meta":   func() { err = message.DecodeRawMeta(frame, &m) },
		"DecodeRawMeta of a heartbeat into a reused Meta": func() { err = message.DecodeRawMeta(hbFrame, &h) },
		"AppendRaw of a KV meta into a reused buffer":     func() { buf, err = kv.AppendRaw(buf[:0]) },
		"Wire.Decode (bytedance) of a KV meta":            func() { err = message.WireBytedance.Decode(frame, &m) },
	} {
		assert.Zero(t, testing.AllocsPerRun(100, f), "%s: allocs per run", name)
		require.NoError(t, err, name)
	}
}

func TestParseWire(t *testing.T) {
	for in, want := range map[string]message.Wire{"": message.WireDmlc, "dmlc": message.WireDmlc, " DMLC ": message.WireDmlc,
		"bytedance": message.WireBytedance, "ByteDance": message.WireBytedance, "byteps": message.WireBytedance} {
		got, err := message.ParseWire(in)
		require.NoError(t, err, "%q", in)
		assert.Equal(t, want, got, "%q", in)
	}
	_, err := message.ParseWire("raw")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `PS_WIRE "raw"`)
	assert.Equal(t, "dmlc", message.WireDmlc.String())
	assert.Equal(t, "bytedance", message.WireBytedance.String())
}

// A frame of the other wire is reported as a mismatch that names PS_WIRE,
// from both sides, and garbage is reported as plain garbage.
func TestWireMismatch(t *testing.T) {
	an := addNodeMeta()
	dmlc := message.EncodeMeta(&an)
	raw := encodeRaw(t, &an)
	var m message.Meta
	for _, tc := range []struct {
		local message.Wire
		frame []byte
		want  string
	}{
		{message.WireBytedance, dmlc, "the peer sent a dmlc-wire meta but this node speaks bytedance (PS_WIRE=bytedance)"},
		{message.WireDmlc, raw, "the peer sent a bytedance-wire meta but this node speaks dmlc (PS_WIRE unset or dmlc)"},
	} {
		err := tc.local.Decode(tc.frame, &m)
		require.Error(t, err)
		assert.True(t, message.IsWireMismatch(err), "%v", err)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), "set the same PS_WIRE on every node")
		var de *message.DecodeError
		assert.ErrorAs(t, err, &de, "the mismatch wraps the local decode error")
	}
	for _, w := range []message.Wire{message.WireDmlc, message.WireBytedance} {
		err := w.Decode([]byte{0xff, 0xff, 0xff}, &m)
		require.Error(t, err)
		assert.False(t, message.IsWireMismatch(err), "%s: garbage is not a mismatch: %v", w, err)
		require.NoError(t, w.Decode(mustEncode(t, w, &an), &m))
		assert.True(t, metaEqual(&an, &m), "%s round trip: got %s", w, dump(&m))
		assert.Equal(t, len(mustEncode(t, w, &an)), w.EncodedLen(&an), "%s EncodedLen", w)
	}
}

func mustEncode(t *testing.T, w message.Wire, m *message.Meta) []byte {
	t.Helper()
	b, err := w.Encode(m)
	require.NoError(t, err)
	return b
}
