package message_test

import (
	"bytes"
	"encoding/hex"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

// pb builds raw protobuf bytes by hand, so that tests can express frames the
// encoder would never produce (unknown fields, odd orders, malformed data).
type pb []byte

func (b pb) raw(p ...byte) pb { return append(b, p...) }

func (b pb) varint(v uint64) pb {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func (b pb) key(num, wt uint64) pb { return b.varint(num<<3 | wt) }

// u writes varint field num.
func (b pb) u(num, v uint64) pb { return b.key(num, 0).varint(v) }

// i32 writes int32 field num the way protobuf does (sign-extended).
func (b pb) i32(num uint64, v int32) pb { return b.u(num, uint64(int64(v))) }

// lp writes length-delimited field num.
func (b pb) lp(num uint64, p []byte) pb { return append(b.key(num, 2).varint(uint64(len(p))), p...) }

// kvPushMeta is a typical KV push request as KVWorker<float> sends it.
func kvPushMeta() message.Meta {
	m := message.NewMeta()
	m.Head = 0
	m.AppID = 0
	m.CustomerID = 0
	m.Timestamp = 1234
	m.Request = true
	m.Push = true
	m.DataType = []message.DataType{message.Uint64, message.Float, message.Int32}
	return m
}

func addNodeMeta() message.Meta {
	m := message.NewMeta()
	m.Timestamp = 0
	m.Control = message.Control{Cmd: message.CmdAddNode, Nodes: []message.Node{
		{Role: message.RoleServer, ID: 8, Hostname: "10.0.0.1", Port: 9000},
		{Role: message.RoleWorker, ID: 9, Hostname: "10.0.0.2", Port: 9001, IsRecovery: true, CustomerID: 2},
	}}
	return m
}

func decode(t *testing.T, b []byte) message.Meta {
	t.Helper()
	var m message.Meta
	require.NoError(t, message.DecodeMeta(b, &m), "DecodeMeta(%x)", b)
	return m
}

// TestDecodeMetaValid covers inputs the encoder would not produce but that
// protobuf (and so C++ ps-lite) accepts, and the defaults for absent fields.
func TestDecodeMetaValid(t *testing.T) {
	node := pb{}.i32(1, 1).i32(2, 9).lp(3, []byte("h")).i32(4, 5).u(5, 0).i32(10, 0)
	tests := []struct {
		name string
		in   pb
		want func(m *message.Meta) // applied to NewMeta()
	}{
		{"empty frame gives defaults", pb{}, func(m *message.Meta) {}},
		{"negative int32s", pb{}.i32(1, -1).i32(7, -2).i32(8, -3).lp(9, pb{}.varint(math.MaxUint64)).i32(10, -4).i32(13, -5),
			func(m *message.Meta) {
				m.Head, m.AppID, m.Timestamp, m.CustomerID, m.Priority = -1, -2, -3, -4, -5
				m.DataType = []message.DataType{-1}
			}},
		{"negative int32 as 5-byte varint (low 32 bits)", pb{}.u(1, 0xffffffff), func(m *message.Meta) { m.Head = -1 }},
		{"int32 truncates to low 32 bits", pb{}.u(13, 1<<32|7), func(m *message.Meta) { m.Priority = 7 }},
		{"explicit Empty app_id and timestamp", pb{}.i32(7, message.Empty).i32(8, message.Empty), func(m *message.Meta) {}},
		{"zero head and customer_id", pb{}.i32(1, 0).i32(10, 0), func(m *message.Meta) { m.Head, m.CustomerID = 0, 0 }},
		{"bools: any non-zero varint is true", pb{}.u(4, 2).u(5, 1<<40).u(6, 1).u(12, 1), func(m *message.Meta) {
			m.Request, m.Push, m.SimpleApp, m.Pull = true, true, true, true
		}},
		{"last occurrence wins", pb{}.i32(1, 3).lp(2, []byte("a")).i32(1, 4).lp(2, []byte("bc")),
			func(m *message.Meta) { m.Head, m.Body = 4, []byte("bc") }},
		{"present empty body", pb{}.lp(2, nil), func(m *message.Meta) {}},
		{"unpacked data_type", pb{}.u(9, 8).u(9, 9), func(m *message.Meta) {
			m.DataType = []message.DataType{message.Uint64, message.Float}
		}},
		{"packed and unpacked data_type mixed", pb{}.lp(9, pb{}.varint(8)).u(9, 9).lp(9, pb{}.varint(3)).lp(9, nil),
			func(m *message.Meta) {
				m.DataType = []message.DataType{message.Uint64, message.Float, message.Int32}
			}},
		{"unknown fields of every wire type skipped",
			pb{}.i32(1, 7).
				u(40, 1).                                                       // varint
				key(41, 1).raw(1, 2, 3, 4, 5, 6, 7, 8).                         // fixed64
				lp(42, []byte("xyz")).                                          // bytes
				key(43, 5).raw(1, 2, 3, 4).                                     // fixed32
				key(44, 3).u(1, 5).key(45, 3).lp(2, nil).key(45, 4).key(44, 4). // nested groups
				i32(13, 2),
			func(m *message.Meta) { m.Head, m.Priority = 7, 2 }},
		{"unknown fields in control and node skipped",
			pb{}.lp(3, pb{}.u(9, 1).i32(1, 2).key(7, 5).raw(0, 0, 0, 0).
				lp(2, pb{}.key(6, 1).raw(0, 0, 0, 0, 0, 0, 0, 0).i32(1, 0).lp(11, []byte("?")).key(12, 3).key(12, 4))),
			func(m *message.Meta) {
				m.Control = message.Control{Cmd: message.CmdAddNode, Nodes: []message.Node{{ID: message.Empty, Port: message.Empty}}}
			}},
		{"node defaults: absent id and port are Empty", pb{}.lp(3, pb{}.i32(1, 2).lp(2, pb{}.i32(1, 2))),
			func(m *message.Meta) {
				m.Control = message.Control{Cmd: message.CmdAddNode, Nodes: []message.Node{{Role: message.RoleScheduler, ID: message.Empty, Port: message.Empty}}}
			}},
		{"node fields", pb{}.lp(3, pb{}.i32(1, 5).lp(2, node)),
			func(m *message.Meta) {
				m.Control = message.Control{Cmd: message.CmdHeartbeat, Nodes: []message.Node{{Role: message.RoleWorker, ID: 9, Hostname: "h", Port: 5}}}
			}},
		{"control occurrences merge", pb{}.lp(3, pb{}.i32(1, 2).lp(2, node)).lp(3, pb{}.lp(2, node)),
			func(m *message.Meta) {
				n := message.Node{Role: message.RoleWorker, ID: 9, Hostname: "h", Port: 5}
				m.Control = message.Control{Cmd: message.CmdAddNode, Nodes: []message.Node{n, n}}
			}},
		{"control with cmd EMPTY is dropped", pb{}.lp(3, pb{}.i32(1, 0).lp(2, node).i32(3, 4).u(4, 5)), func(m *message.Meta) {}},
		{"barrier_group kept for BARRIER, msg_sig dropped", pb{}.lp(3, pb{}.i32(1, 3).i32(3, -848099239).u(4, 5)),
			func(m *message.Meta) { m.Control = message.Control{Cmd: message.CmdBarrier, BarrierGroup: -848099239} }},
		{"msg_sig kept for ACK, barrier_group dropped", pb{}.lp(3, pb{}.i32(1, 4).i32(3, 7).u(4, math.MaxUint64)),
			func(m *message.Meta) { m.Control = message.Control{Cmd: message.CmdAck, MsgSig: math.MaxUint64} }},
		{"unknown command and role values kept", pb{}.lp(3, pb{}.i32(1, 99).lp(2, pb{}.i32(1, -3))),
			func(m *message.Meta) {
				m.Control = message.Control{Cmd: 99, Nodes: []message.Node{{Role: -3, ID: message.Empty, Port: message.Empty}}}
			}},
		{"data_size read but not stored", pb{}.i32(11, 64), func(m *message.Meta) {}},
		{"extension fields", pb{}.u(14, 3).i32(15, -1).u(16, 5).u(17, 6).u(18, math.MaxUint64).u(19, 1<<63).u(20, 1),
			func(m *message.Meta) {
				m.Ext = message.Ext{Epoch: 3, SendNanos: -1, RecvNanos: 5, HandleNano: 6, PushSeq: math.MaxUint64, Iteration: math.MinInt64, Redirect: true}
			}},
		{"fork raw fields", pb{}.u(21, math.MaxUint64).u(22, 1<<40).i32(23, 30720000).i32(24, -2),
			func(m *message.Meta) {
				m.Raw = message.RawFields{Key: math.MaxUint64, Addr: 1 << 40, ValLen: 30720000, Option: -2}
			}},
		{"extension fields before standard ones", pb{}.u(18, 1).i32(1, 2), func(m *message.Meta) {
			m.Head, m.Ext.PushSeq = 2, 1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := message.NewMeta()
			tt.want(&want)
			got := decode(t, tt.in)
			require.True(t, metaEqual(&got, &want), "decoded\n got %s\nwant %s", dump(&got), dump(&want))
			// Whatever decodes must survive a round trip unchanged.
			again := decode(t, message.EncodeMeta(&got))
			assert.True(t, metaEqual(&again, &got), "round trip\n got %s\nwant %s", dump(&again), dump(&got))
		})
	}
}

func TestEncodeMetaNegativeInt32IsTenBytes(t *testing.T) {
	m := message.NewMeta()
	m.Head = -1
	m.Priority = math.MinInt32
	got := message.EncodeMeta(&m)
	want := pb{}.raw(0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01).
		raw(0x20, 0, 0x28, 0, 0x30, 0). // request, push, simple_app
		raw(0x50, 0xff, 0xff, 0xff, 0xff, 0x07).
		raw(0x60, 0).
		raw(0x68, 0x80, 0x80, 0x80, 0x80, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x01)
	assert.Equal(t, []byte(want), got)
}

// TestEncodeMetaEmptyValues checks which fields are omitted, against frames
// captured from C++ (TERMINATE: 22 bytes; KV push response).
func TestEncodeMetaEmptyValues(t *testing.T) {
	term := message.NewMeta()
	term.CustomerID = 0
	term.Control.Cmd = message.CmdTerminate
	resp := message.NewMeta()
	resp.Head, resp.AppID, resp.CustomerID, resp.Timestamp, resp.Push = 0, 0, 0, 5, true
	tests := []struct {
		name string
		m    message.Meta
		hex  string
	}{
		{"NewMeta", message.NewMeta(), "08ffffffff07200028003000" + "50ffffffff07" + "60006800"},
		{"TERMINATE", term, "08ffffffff071a020801200028003000500060006800"},
		{"push response", resp, "0800200028013000380040055000" + "60006800"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.hex, hex.EncodeToString(message.EncodeMeta(&tt.m)))
		})
	}
}

// TestEncodeMetaExtensions checks that extension fields follow the C++ bytes
// unchanged (so C++ ps-lite can skip them), are omitted when zero, and
// survive a round trip.
func TestEncodeMetaExtensions(t *testing.T) {
	base := kvPushMeta()
	plain := message.EncodeMeta(&base)

	zero := base
	zero.Ext = message.Ext{}
	require.Equal(t, plain, message.EncodeMeta(&zero), "zero Ext changed the encoding")

	exts := []message.Ext{
		{Epoch: 1},
		{SendNanos: -1},
		{RecvNanos: math.MaxInt64},
		{HandleNano: 123456},
		{PushSeq: math.MaxUint64},
		{Iteration: math.MinInt64},
		{Epoch: 7, SendNanos: 1700000000123456789, RecvNanos: 1700000000223456789, HandleNano: 1500, PushSeq: 42, Iteration: -3},
	}
	for _, e := range exts {
		m := base
		m.Ext = e
		enc := message.EncodeMeta(&m)
		assert.True(t, bytes.HasPrefix(enc, plain), "%+v: encoding %x does not start with the plain meta %x", e, enc, plain)
		got := decode(t, enc)
		assert.Equal(t, e, got.Ext, "%+v: decoded Ext", e)
		assert.Len(t, enc, m.EncodedLen(), "%+v: EncodedLen", e)
	}
}

// TestEncodeMetaRawFields checks the BytePS fork's KV request fields on the
// dmlc wire: fields 21-24 after the C++ bytes, each only when non-zero;
// the raw fields the dmlc wire does not carry (devices, sid) are not
// written at all.
func TestEncodeMetaRawFields(t *testing.T) {
	base := kvPushMeta()
	plain := message.EncodeMeta(&base)
	notCarried := base
	notCarried.Raw = message.RawFields{SrcDevType: 1, SrcDevID: 2, DstDevType: 3, DstDevID: 4, SID: 5}
	require.Equal(t, plain, message.EncodeMeta(&notCarried), "device and sid fields changed the dmlc encoding")

	tests := []struct {
		raw  message.RawFields
		tail pb // the bytes after the plain meta
	}{
		{message.RawFields{Key: 7}, pb{}.u(21, 7)},
		{message.RawFields{Addr: 0xdeadbeef}, pb{}.u(22, 0xdeadbeef)},
		{message.RawFields{ValLen: 1024000}, pb{}.i32(23, 1024000)},
		{message.RawFields{ValLen: -1}, pb{}.i32(23, -1)},
		{message.RawFields{Option: 3}, pb{}.i32(24, 3)},
		{message.RawFields{Key: 1, Addr: 2, ValLen: 3, Option: 4}, pb{}.u(21, 1).u(22, 2).i32(23, 3).i32(24, 4)},
	}
	for _, tt := range tests {
		m := base
		m.Raw = tt.raw
		m.Ext.Redirect = true
		enc := message.EncodeMeta(&m)
		want := append(append(slices.Clone(plain), pb{}.u(20, 1)...), tt.tail...)
		assert.Equal(t, []byte(want), enc, "%+v: encoding", tt.raw)
		assert.Len(t, enc, m.EncodedLen(), "%+v: EncodedLen", tt.raw)
		got := decode(t, enc)
		assert.Equal(t, tt.raw, got.Raw, "%+v: decoded Raw", tt.raw)
	}
}

// TestDecodeMetaErrors checks that malformed frames are rejected with an
// error that names the field, the offset and the reason.
func TestDecodeMetaErrors(t *testing.T) {
	nodes := func(n int) pb {
		c := pb{}.i32(1, 2)
		for range n {
			c = c.lp(2, pb{}.i32(1, 0))
		}
		return pb{}.lp(3, c)
	}
	deepGroups := pb{}
	for range 100 {
		deepGroups = deepGroups.key(40, 3)
	}
	tests := []struct {
		name   string
		in     pb
		offset int
		want   []string // substrings of the error
	}{
		{"truncated key", pb{0x80}, 0, []string{"truncated field key", "end of frame after 1 byte(s)"}},
		{"truncated value", pb{}.raw(0x08, 0xff), 1, []string{"head (1)", "truncated varint"}},
		{"truncated value of unknown field", pb{}.key(30, 0).raw(0x80, 0x80), 2, []string{"unknown field 30", "truncated varint"}},
		{"varint longer than 10 bytes", pb{}.raw(0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), 1,
			[]string{"head (1)", "longer than 10 bytes"}},
		{"10th varint byte > 1", pb{}.raw(0x68, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02), 1,
			[]string{"priority (13)", "overflowing 64 bits"}},
		{"body length past end", pb{}.raw(0x12, 0x05, 'a', 'b'), 1, []string{"body (2)", "length 5 exceeds the 2 byte(s) left in the frame"}},
		{"huge body length", pb{}.key(2, 2).varint(1 << 63), 1, []string{"body (2)", "length 9223372036854775808 exceeds"}},
		{"huge unknown length", pb{}.key(99, 2).varint(math.MaxUint64), 2, []string{"unknown field 99", "exceeds"}},
		{"control length past end", pb{}.raw(0x1a, 0x10, 0x08, 0x02), 1, []string{"control (3)", "exceeds"}},
		{"node length past control end", pb{}.lp(3, pb{}.raw(0x12, 0x05, 0x08)).raw(0, 0, 0, 0, 0), 3,
			[]string{"control.node (2)", "length 5 exceeds the 1 byte(s) left in the control"}},
		{"truncated varint inside node", pb{}.lp(3, pb{}.i32(1, 2).lp(2, pb{}.raw(0x08, 0x80))).raw(0x00), 7,
			[]string{"control.node[0].role (1)", "truncated varint", "end of control.node[0] after 1 byte(s)"}},
		{"hostname length past node end", pb{}.lp(3, pb{}.i32(1, 2).lp(2, pb{}.i32(1, 0)).lp(2, pb{}.i32(1, 0).raw(0x1a, 0x7f))), 13,
			[]string{"control.node[1].hostname (3)", "exceeds"}},
		{"truncated packed data_type", pb{}.lp(9, pb{}.raw(0x08, 0x80)), 3, []string{"data_type (9) element", "truncated varint", "packed data_type"}},
		{"wrong wire type: head as bytes", pb{}.lp(1, nil), 0, []string{"head (1)", "wire type 2 (bytes), want 0 (varint)"}},
		{"wrong wire type: body as varint", pb{}.u(2, 1), 0, []string{"body (2)", "wire type 0 (varint), want 2 (bytes)"}},
		{"wrong wire type: control as varint", pb{}.u(3, 1), 0, []string{"control (3)", "want 2"}},
		{"wrong wire type: cmd as fixed32", pb{}.lp(3, pb{}.key(1, 5).raw(2, 0, 0, 0)), 2, []string{"control.cmd (1)", "wire type 5 (fixed32)"}},
		{"wrong wire type: node as varint", pb{}.lp(3, pb{}.i32(1, 2).u(2, 1)), 4, []string{"control.node (2)", "want 2"}},
		{"wrong wire type: hostname as varint", pb{}.lp(3, pb{}.i32(1, 2).lp(2, pb{}.i32(1, 0).u(3, 1))), 8,
			[]string{"control.node[0].hostname (3)", "want 2"}},
		{"wrong wire type: data_type as fixed64", pb{}.key(9, 1).raw(0, 0, 0, 0, 0, 0, 0, 0), 0, []string{"data_type (9)", "wire type 1 (fixed64)"}},
		{"wrong wire type: epoch as bytes", pb{}.lp(14, []byte{1}), 0, []string{"epoch (14)", "want 0"}},
		{"wrong wire type: push_seq as fixed64", pb{}.i32(1, 0).key(18, 1).raw(1, 0, 0, 0, 0, 0, 0, 0), 2, []string{"push_seq (18)", "wire type 1"}},
		{"wrong wire type: data_size as bytes", pb{}.lp(11, nil), 0, []string{"data_size (11)"}},
		{"field number 0", pb{}.raw(0x02, 0x00), 0, []string{"invalid field number 0"}},
		{"field number too large", pb{}.key(1<<29, 0).raw(0), 0, []string{"invalid field number 536870912"}},
		{"invalid wire type 6", pb{}.key(40, 6), 0, []string{"unknown field 40", "invalid wire type 6"}},
		{"invalid wire type 7 in node", pb{}.lp(3, pb{}.i32(1, 2).lp(2, pb{}.key(20, 7))), 6, []string{"control.node[0].unknown field 20", "invalid wire type 7"}},
		{"end-group without start", pb{}.key(40, 4), 0, []string{"end-group without a matching start-group"}},
		{"mismatched end-group", pb{}.key(40, 3).key(41, 4), 2, []string{"end-group for field 41 closes group 40"}},
		{"unterminated group", pb{}.key(40, 3).u(1, 1), 0, []string{"group not terminated"}},
		{"groups nested too deep", deepGroups, 128, []string{"nested deeper than 64"}},
		{"truncated fixed64", pb{}.key(40, 1).raw(1, 2, 3), 0, []string{"truncated fixed64 value: 3 byte(s) left"}},
		{"truncated fixed32", pb{}.key(40, 5).raw(1), 0, []string{"truncated fixed32"}},
		{"control without cmd", pb{}.i32(1, 0).lp(3, nil), 2, []string{"control.cmd (1)", "required field missing"}},
		{"node without role", pb{}.lp(3, pb{}.i32(1, 2).lp(2, pb{}.i32(2, 8))), 8, []string{"control.node[0].role (1)", "required field missing"}},
		{"too many nodes", nodes(message.MaxNodes + 1), 6 + 4*message.MaxNodes, []string{"control.node (2)", "more than 4096 nodes"}},
		{"too many data types", pb{}.lp(9, make([]byte, message.MaxDataTypes+1)), 0, []string{"data_type (9)", "more than 65536 entries"}},
		{"too many unpacked data types", pb{}.lp(9, make([]byte, message.MaxDataTypes)).u(9, 1), 4 + message.MaxDataTypes,
			[]string{"data_type (9)", "more than 65536 entries"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m message.Meta
			err := message.DecodeMeta(tt.in, &m)
			require.Error(t, err, "DecodeMeta(%.64x) succeeded: %s", []byte(tt.in), dump(&m))
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w)
			}
			var de *message.DecodeError
			require.ErrorAs(t, err, &de)
			assert.ErrorContains(t, err, "offset")
			assert.Equal(t, tt.offset, de.Offset, "error %q: Offset", err)
		})
	}

	// The limits are inclusive.
	m := decode(t, nodes(message.MaxNodes))
	assert.Len(t, m.Control.Nodes, message.MaxNodes)
	m = decode(t, pb{}.lp(9, make([]byte, message.MaxDataTypes)))
	assert.Len(t, m.DataType, message.MaxDataTypes)
}

// TestDecodeMetaNoPanicOnDamage truncates and corrupts every golden frame and
// the local samples: decoding must fail cleanly or succeed, never panic.
func TestDecodeMetaNoPanicOnDamage(t *testing.T) {
	var frames [][]byte
	for _, r := range loadDmlcGolden(t) {
		frames = append(frames, r.meta)
	}
	kv, an := kvPushMeta(), addNodeMeta()
	frames = append(frames, message.EncodeMeta(&kv), message.EncodeMeta(&an))
	var m message.Meta
	for _, f := range frames {
		for n := range len(f) {
			_ = message.DecodeMeta(f[:n], &m)
		}
		b := bytes.Clone(f)
		for i := range b {
			for _, x := range []byte{0x00, 0x7f, 0x80, 0xff} {
				old := b[i]
				b[i] = x
				_ = message.DecodeMeta(b, &m)
				b[i] = old
			}
		}
	}
}

// TestDecodeMetaCopiesInput checks that the decoded Meta does not alias the
// frame, which the transport reuses.
func TestDecodeMetaCopiesInput(t *testing.T) {
	m := addNodeMeta()
	m.Body = []byte("payload")
	frame := message.EncodeMeta(&m)
	got := decode(t, frame)
	for i := range frame {
		frame[i] = 0xaa
	}
	assert.True(t, metaEqual(&got, &m), "decoded Meta changed with its input:\n got %s\nwant %s", dump(&got), dump(&m))
}

// TestDecodeMetaReuse decodes different kinds of frames into one Meta: no
// state may leak from one frame to the next.
func TestDecodeMetaReuse(t *testing.T) {
	an, kv := addNodeMeta(), kvPushMeta()
	kv.Body = []byte("b")
	kv.Ext.Epoch = 4
	ack := message.NewMeta()
	ack.Control = message.Control{Cmd: message.CmdAck, MsgSig: 99}
	var m message.Meta
	m.Sender, m.Recver, m.DataSize = 5, 6, 7
	for _, want := range []message.Meta{an, kv, ack, an, message.NewMeta(), kv} {
		require.NoError(t, message.DecodeMeta(message.EncodeMeta(&want), &m))
		require.True(t, metaEqual(&m, &want), "got %s\nwant %s", dump(&m), dump(&want))
	}
}

func TestMarshalToAppends(t *testing.T) {
	m := kvPushMeta()
	want := message.EncodeMeta(&m)
	prefix := []byte("prefix")
	got := m.MarshalTo(prefix)
	assert.Equal(t, append([]byte("prefix"), want...), got, "MarshalTo(prefix)")
	assert.Equal(t, len(want), cap(want), "EncodeMeta: want an exact fit")
}

func TestMetaCodecAllocs(t *testing.T) {
	kv := kvPushMeta()
	kv.Ext = message.Ext{Epoch: 3, SendNanos: 1700000000123456789, PushSeq: 17}
	kv.Raw = message.RawFields{Key: 1 << 40, ValLen: 30720000}
	frame := message.EncodeMeta(&kv)
	buf := make([]byte, 0, 256)
	var m message.Meta
	require.NoError(t, message.DecodeMeta(frame, &m)) // warm up m's capacity
	check := func(name string, want float64, f func()) {
		t.Helper()
		assert.Equal(t, want, testing.AllocsPerRun(100, f), "%s: allocs per run", name)
	}
	var decodeErr error
	check("DecodeMeta of a KV meta into a reused Meta", 0, func() { decodeErr = message.DecodeMeta(frame, &m) })
	require.NoError(t, decodeErr)
	check("MarshalTo into a buffer with capacity", 0, func() { buf = kv.MarshalTo(buf[:0]) })
	check("EncodeMeta", 1, func() { _ = message.EncodeMeta(&kv) })
	an := addNodeMeta()
	anFrame := message.EncodeMeta(&an)
	check("MarshalTo of a control meta", 0, func() { buf = an.MarshalTo(buf[:0]) })
	withBody := kv
	withBody.Body = []byte("body")
	bodyFrame := message.EncodeMeta(&withBody)
	check("DecodeMeta with a body", 1, func() { _ = message.DecodeMeta(bodyFrame, &m) })
	// One string per hostname; the node slice is reused.
	check("DecodeMeta of ADD_NODE", float64(len(an.Control.Nodes)), func() { _ = message.DecodeMeta(anFrame, &m) })
}

func TestCheckFrames(t *testing.T) {
	m := kvPushMeta()
	assert.NoError(t, message.CheckFrames(&m, 3), "3 frames for 3 data types")
	err := message.CheckFrames(&m, 2)
	require.ErrorIs(t, err, message.ErrFrameCount, "2 frames for 3 data types")
	for _, w := range []string{"3 data_type entries", "2 data frame(s)"} {
		assert.ErrorContains(t, err, w)
	}
	ctrl := message.NewMeta()
	assert.NoError(t, message.CheckFrames(&ctrl, 0), "control meta without frames")
	assert.Error(t, message.CheckFrames(&ctrl, 1), "control meta with a frame")
}

func BenchmarkEncodeMeta(b *testing.B) {
	m := kvPushMeta()
	b.Run("MarshalTo", func(b *testing.B) {
		buf := make([]byte, 0, 64)
		b.ReportAllocs()
		for b.Loop() {
			buf = m.MarshalTo(buf[:0])
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("EncodeMeta", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = message.EncodeMeta(&m)
		}
	})
	b.Run("MarshalTo+Ext", func(b *testing.B) {
		m := m
		m.Ext = message.Ext{Epoch: 3, SendNanos: 1700000000123456789, PushSeq: 17}
		buf := make([]byte, 0, 64)
		b.ReportAllocs()
		for b.Loop() {
			buf = m.MarshalTo(buf[:0])
		}
	})
}

func BenchmarkDecodeMeta(b *testing.B) {
	m := kvPushMeta()
	frame := message.EncodeMeta(&m)
	b.Run("reuse", func(b *testing.B) {
		var out message.Meta
		b.SetBytes(int64(len(frame)))
		b.ReportAllocs()
		for b.Loop() {
			if err := message.DecodeMeta(frame, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out message.Meta
			if err := message.DecodeMeta(frame, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	m.Ext = message.Ext{Epoch: 3, SendNanos: 1700000000123456789, PushSeq: 17}
	extFrame := message.EncodeMeta(&m)
	b.Run("reuse+Ext", func(b *testing.B) {
		var out message.Meta
		b.ReportAllocs()
		for b.Loop() {
			if err := message.DecodeMeta(extFrame, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
