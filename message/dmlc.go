package message

// This file is the meta codec of the dmlc generation of ps-lite, whose meta
// frame is the proto2 message PBMeta. It is written by hand rather than
// generated because the encoder must reproduce the C++ van's choices of which
// fields to write (see the rules on MarshalTo), which a generic protobuf
// library does not let us control, and because the hot path (one meta per KV
// message) should not allocate.

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// Decoder limits. The input length already bounds everything, but a frame can
// be large (ZeroMQ accepts multi-megabyte frames), so counts that size a
// caller-visible slice are capped as well.
const (
	// MaxNodes is the most control.node entries DecodeMeta accepts. ps-lite's
	// largest list is the scheduler's ADD_NODE reply: one entry per process.
	MaxNodes = 4096
	// MaxDataTypes is the most data_type entries (= data frames) DecodeMeta
	// accepts. ps-lite messages carry at most three (keys, vals, lens).
	MaxDataTypes = 65536
	// maxGroupDepth bounds recursion when skipping nested unknown groups.
	maxGroupDepth = 64
)

// Protobuf wire types.
const (
	wireVarint     = 0
	wireFixed64    = 1
	wireBytes      = 2
	wireStartGroup = 3
	wireEndGroup   = 4
	wireFixed32    = 5
)

var wireTypeNames = [...]string{"varint", "fixed64", "bytes", "start-group", "end-group", "fixed32", "invalid(6)", "invalid(7)"}

// PBMeta field numbers; 14 and up are extensions that C++ ps-lite skips as
// unknown fields: 14-20 elasticps's (Ext), 21-24 the BytePS fork's KV
// request fields that its raw struct meta has and PBMeta lacks (Raw).
const (
	fHead       = 1
	fBody       = 2
	fControl    = 3
	fRequest    = 4
	fPush       = 5
	fSimpleApp  = 6
	fAppID      = 7
	fTimestamp  = 8
	fDataType   = 9
	fCustomerID = 10
	fDataSize   = 11
	fPull       = 12
	fPriority   = 13
	fEpoch      = 14
	fSendNanos  = 15
	fRecvNanos  = 16
	fHandleNano = 17
	fPushSeq    = 18
	fIteration  = 19
	fRedirect   = 20
	fRawKey     = 21
	fRawAddr    = 22
	fRawValLen  = 23
	fRawOption  = 24
)

// PBControl and PBNode field numbers.
const (
	fCtrlCmd          = 1
	fCtrlNode         = 2
	fCtrlBarrierGroup = 3
	fCtrlMsgSig       = 4

	fNodeRole       = 1
	fNodeID         = 2
	fNodeHostname   = 3
	fNodePort       = 4
	fNodeIsRecovery = 5
	fNodeCustomerID = 10
	fNodeStandby    = 14 // elasticps extension
	fNodeWantRank   = 15 // elasticps extension: the preferred rank
)

var metaFieldNames = map[uint64]string{
	fHead: "head", fBody: "body", fControl: "control", fRequest: "request",
	fPush: "push", fSimpleApp: "simple_app", fAppID: "app_id", fTimestamp: "timestamp",
	fDataType: "data_type", fCustomerID: "customer_id", fDataSize: "data_size",
	fPull: "pull", fPriority: "priority", fEpoch: "epoch", fSendNanos: "send_nanos",
	fRecvNanos: "recv_nanos", fHandleNano: "handle_nanos", fPushSeq: "push_seq",
	fIteration: "iteration", fRedirect: "redirect", fRawKey: "raw_key",
	fRawAddr: "raw_addr", fRawValLen: "raw_val_len", fRawOption: "raw_option",
}

var controlFieldNames = map[uint64]string{
	fCtrlCmd: "cmd", fCtrlNode: "node", fCtrlBarrierGroup: "barrier_group", fCtrlMsgSig: "msg_sig",
}

var nodeFieldNames = map[uint64]string{
	fNodeRole: "role", fNodeID: "id", fNodeHostname: "hostname", fNodePort: "port",
	fNodeIsRecovery: "is_recovery", fNodeCustomerID: "customer_id", fNodeStandby: "standby",
	fNodeWantRank: "want_rank",
}

// tag returns the key of a field: number and wire type as protobuf combines them.
func tag(num, wt uint64) uint64 { return num<<3 | wt }

// ---------------------------------------------------------------------------
// Encoding

// sizeVarint is the encoded length of v as a base-128 varint.
func sizeVarint(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// sizeInt32 is the encoded length of a protobuf int32: negative values are
// sign-extended to 64 bits and so always take 10 bytes.
func sizeInt32(v int32) int { return sizeVarint(uint64(int64(v))) }

func appendVarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func appendInt32(dst []byte, num uint64, v int32) []byte {
	dst = appendVarint(dst, tag(num, wireVarint))
	return appendVarint(dst, uint64(int64(v)))
}

func appendBool(dst []byte, num uint64, v bool) []byte {
	b := byte(0)
	if v {
		b = 1
	}
	return append(appendVarint(dst, tag(num, wireVarint)), b)
}

func appendBytes(dst []byte, num uint64, b []byte) []byte {
	dst = appendVarint(dst, tag(num, wireBytes))
	dst = appendVarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendString(dst []byte, num uint64, s string) []byte {
	dst = appendVarint(dst, tag(num, wireBytes))
	dst = appendVarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// sizeTagged is the length of field num holding varint value v.
func sizeTagged(num, v uint64) int { return sizeVarint(tag(num, wireVarint)) + sizeVarint(v) }

func (n *Node) encodedLen() int {
	return 1 + sizeInt32(int32(n.Role)) +
		1 + sizeInt32(n.ID) +
		1 + sizeVarint(uint64(len(n.Hostname))) + len(n.Hostname) +
		1 + sizeInt32(n.Port) +
		2 + // is_recovery
		1 + sizeInt32(n.CustomerID) +
		standbyLen(n.Standby) +
		wantRankLen(n.WantRank)
}

// wantRankLen: the preferred rank is written only when set.
func wantRankLen(w int32) int {
	if w > 0 {
		return 1 + sizeInt32(w-1)
	}
	return 0
}

// standbyLen: the standby extension is written only when set, so C++
// ps-lite never sees it from ordinary nodes.
func standbyLen(on bool) int {
	if on {
		return 2
	}
	return 0
}

func (n *Node) appendTo(dst []byte) []byte {
	// C++ PackMeta sets every one of these, so proto2 presence writes them all,
	// including an empty hostname.
	dst = appendInt32(dst, fNodeRole, int32(n.Role))
	dst = appendInt32(dst, fNodeID, n.ID)
	dst = appendString(dst, fNodeHostname, n.Hostname)
	dst = appendInt32(dst, fNodePort, n.Port)
	dst = appendBool(dst, fNodeIsRecovery, n.IsRecovery)
	dst = appendInt32(dst, fNodeCustomerID, n.CustomerID)
	if n.Standby {
		dst = appendBool(dst, fNodeStandby, true)
	}
	if n.WantRank > 0 {
		dst = appendInt32(dst, fNodeWantRank, n.WantRank-1)
	}
	return dst
}

func (c *Control) encodedLen() int {
	n := 1 + sizeInt32(int32(c.Cmd))
	for i := range c.Nodes {
		l := c.Nodes[i].encodedLen()
		n += 1 + sizeVarint(uint64(l)) + l
	}
	if c.Cmd.isBarrier() {
		n += 1 + sizeInt32(c.BarrierGroup)
	}
	if c.Cmd == CmdAck {
		n += 1 + sizeVarint(c.MsgSig)
	}
	return n
}

func (c *Control) appendTo(dst []byte) []byte {
	dst = appendInt32(dst, fCtrlCmd, int32(c.Cmd))
	for i := range c.Nodes {
		n := &c.Nodes[i]
		dst = appendVarint(dst, tag(fCtrlNode, wireBytes))
		dst = appendVarint(dst, uint64(n.encodedLen()))
		dst = n.appendTo(dst)
	}
	// The reference sets barrier_group and msg_sig only for the commands that
	// use them; writing them otherwise would change the bytes.
	if c.Cmd.isBarrier() {
		dst = appendInt32(dst, fCtrlBarrierGroup, c.BarrierGroup)
	}
	if c.Cmd == CmdAck {
		dst = appendVarint(dst, tag(fCtrlMsgSig, wireVarint))
		dst = appendVarint(dst, c.MsgSig)
	}
	return dst
}

func (m *Meta) dataTypeLen() int {
	n := 0
	for _, t := range m.DataType {
		n += sizeInt32(int32(t))
	}
	return n
}

// extField is one extension field as it goes on the wire.
type extField struct{ num, v uint64 }

// wireFields lists the extension fields of m in wire order, so that
// EncodedLen and MarshalTo cannot disagree about them. The raw int32 fields
// are sign-extended as protobuf int32s are; of Raw, the dmlc wire carries
// only the fields the fork's KVServer hands to its handler.
func (m *Meta) wireFields() [11]extField {
	e, r := &m.Ext, &m.Raw
	var redirect uint64
	if e.Redirect {
		redirect = 1
	}
	return [11]extField{
		{fEpoch, e.Epoch},
		{fSendNanos, uint64(e.SendNanos)},
		{fRecvNanos, uint64(e.RecvNanos)},
		{fHandleNano, uint64(e.HandleNano)},
		{fPushSeq, e.PushSeq},
		{fIteration, uint64(e.Iteration)},
		{fRedirect, redirect},
		{fRawKey, r.Key},
		{fRawAddr, r.Addr},
		{fRawValLen, uint64(int64(r.ValLen))},
		{fRawOption, uint64(int64(r.Option))},
	}
}

// EncodedLen returns the number of bytes MarshalTo appends for m.
func (m *Meta) EncodedLen() int {
	n := 1 + sizeInt32(m.Head)
	if len(m.Body) > 0 {
		n += 1 + sizeVarint(uint64(len(m.Body))) + len(m.Body)
	}
	if m.Control.Cmd != CmdEmpty {
		l := m.Control.encodedLen()
		n += 1 + sizeVarint(uint64(l)) + l
	}
	n += 3 * 2 // request, push, simple_app
	if m.AppID != Empty {
		n += 1 + sizeInt32(m.AppID)
	}
	if m.Timestamp != Empty {
		n += 1 + sizeInt32(m.Timestamp)
	}
	if len(m.DataType) > 0 {
		l := m.dataTypeLen()
		n += 1 + sizeVarint(uint64(l)) + l
	}
	n += 1 + sizeInt32(m.CustomerID)
	n += 2 // pull
	n += 1 + sizeInt32(m.Priority)
	for _, f := range m.wireFields() {
		if f.v != 0 {
			n += sizeTagged(f.num, f.v)
		}
	}
	return n
}

// MarshalTo appends the dmlc PBMeta encoding of m to dst and returns the
// extended slice. It allocates only if dst lacks capacity for EncodedLen
// bytes.
//
// The output is byte-identical to C++ ps-lite's PackMeta: fields in ascending
// number order; head, request, push, simple_app, customer_id, pull and
// priority always; app_id and timestamp unless Empty; body and data_type
// (packed) unless empty; control only when Cmd != CmdEmpty, with
// barrier_group only for CmdBarrier (and the fork's CmdInstanceBarrier,
// which instance groups use on this wire too) and msg_sig only for CmdAck. data_size,
// Sender and Recver are never written (the van does not transmit them). The
// Ext fields follow as fields 14-20 and Raw's Key, Addr, ValLen and Option
// as 21-24, each only when non-zero, so a meta without extensions is
// exactly what C++ sends, and C++ skips them otherwise.
func (m *Meta) MarshalTo(dst []byte) []byte {
	dst = slices.Grow(dst, m.EncodedLen())
	dst = appendInt32(dst, fHead, m.Head)
	if len(m.Body) > 0 {
		dst = appendBytes(dst, fBody, m.Body)
	}
	if m.Control.Cmd != CmdEmpty {
		dst = appendVarint(dst, tag(fControl, wireBytes))
		dst = appendVarint(dst, uint64(m.Control.encodedLen()))
		dst = m.Control.appendTo(dst)
	}
	dst = appendBool(dst, fRequest, m.Request)
	dst = appendBool(dst, fPush, m.Push)
	dst = appendBool(dst, fSimpleApp, m.SimpleApp)
	if m.AppID != Empty {
		dst = appendInt32(dst, fAppID, m.AppID)
	}
	if m.Timestamp != Empty {
		dst = appendInt32(dst, fTimestamp, m.Timestamp)
	}
	if len(m.DataType) > 0 {
		dst = appendVarint(dst, tag(fDataType, wireBytes))
		dst = appendVarint(dst, uint64(m.dataTypeLen()))
		for _, t := range m.DataType {
			dst = appendVarint(dst, uint64(int64(t)))
		}
	}
	dst = appendInt32(dst, fCustomerID, m.CustomerID)
	dst = appendBool(dst, fPull, m.Pull)
	dst = appendInt32(dst, fPriority, m.Priority)
	for _, f := range m.wireFields() {
		if f.v != 0 {
			dst = appendVarint(dst, tag(f.num, wireVarint))
			dst = appendVarint(dst, f.v)
		}
	}
	return dst
}

// EncodeMeta returns the dmlc PBMeta encoding of m in a new slice of exactly
// the right size. See MarshalTo for the rules.
func EncodeMeta(m *Meta) []byte {
	return m.MarshalTo(make([]byte, 0, m.EncodedLen()))
}

// ---------------------------------------------------------------------------
// Decoding

// DecodeError describes why a meta frame could not be decoded.
type DecodeError struct {
	Offset int    // byte offset in the frame where the problem was found
	Field  string // field path such as "control.node[1].port (4)", or "" for a bad key
	Reason string
}

func (e *DecodeError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("message: malformed meta at offset %d: %s", e.Offset, e.Reason)
	}
	return fmt.Sprintf("message: malformed meta at offset %d: %s: %s", e.Offset, e.Field, e.Reason)
}

// msgInfo describes a message kind for error messages. Names are only
// formatted on the error path, so decoding does not allocate.
type msgInfo struct {
	name   string // "" for PBMeta, else e.g. "control" or "control.node"
	names  map[uint64]string
	packed bool // the packed data_type payload rather than a message
}

var (
	metaInfo     = &msgInfo{names: metaFieldNames}
	controlInfo  = &msgInfo{name: "control", names: controlFieldNames}
	nodeInfo     = &msgInfo{name: "control.node", names: nodeFieldNames}
	dataTypeInfo = &msgInfo{name: "data_type", names: metaFieldNames, packed: true}
)

// reader walks one (sub)message. base is the absolute offset of b[0] in the
// frame, so that errors point into the whole frame.
//
// The first error is kept in err and moves i to the end, which ends every
// loop; the per-field helpers therefore return plain values and the decode
// loops need no error plumbing beyond one check per key.
type reader struct {
	b     []byte
	i     int
	base  int
	msg   *msgInfo
	index int // element index of a repeated message, for errors; -1 if none
	err   *DecodeError
}

// what names the message r walks: "frame", "control", "control.node[2]".
func (r *reader) what() string {
	switch {
	case r.msg.name == "":
		return "frame"
	case r.msg.packed:
		return "packed " + r.msg.name
	case r.index >= 0:
		return fmt.Sprintf("%s[%d]", r.msg.name, r.index)
	}
	return r.msg.name
}

// fieldName names field num, e.g. "control.node[1].port (4)".
func (r *reader) fieldName(num uint64) string {
	if r.msg.packed {
		return fmt.Sprintf("%s (%d) element", r.msg.name, num)
	}
	prefix := ""
	if r.msg.name != "" {
		prefix = r.what() + "."
	}
	if s, ok := r.msg.names[num]; ok {
		return fmt.Sprintf("%s%s (%d)", prefix, s, num)
	}
	return fmt.Sprintf("%sunknown field %d", prefix, num)
}

// fail records an error at offset off of r.b about field num (0: a key).
func (r *reader) fail(off int, num uint64, format string, args ...any) {
	if r.err == nil {
		field := ""
		if num != 0 {
			field = r.fieldName(num)
		}
		r.err = &DecodeError{Offset: r.base + off, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	r.i = len(r.b)
}

// sub returns a reader for payload p, which starts at offset start of r.b;
// index is the element index if p is an element of a repeated field, or -1.
func (r *reader) sub(p []byte, start int, msg *msgInfo, index int) reader {
	return reader{b: p, base: r.base + start, msg: msg, index: index}
}

// absorb takes over the error of a finished sub-reader.
func (r *reader) absorb(c *reader) {
	if c.err != nil && r.err == nil {
		r.err = c.err
		r.i = len(r.b)
	}
}

// varint reads a base-128 varint for field num (0: a key).
func (r *reader) varint(num uint64) uint64 {
	// Nearly every key and value in a meta is a single byte.
	if i := r.i; i < len(r.b) {
		if c := r.b[i]; c < 0x80 {
			r.i = i + 1
			return uint64(c)
		}
	}
	return r.varintSlow(num)
}

func (r *reader) varintSlow(num uint64) uint64 {
	var v uint64
	start := r.i
	for shift := uint(0); ; shift += 7 {
		if r.i >= len(r.b) {
			what := "varint"
			if num == 0 {
				what = "field key"
			}
			r.fail(start, num, "truncated %s: end of %s after %d byte(s)", what, r.what(), r.i-start)
			return 0
		}
		c := r.b[r.i]
		r.i++
		if shift == 63 && c > 1 {
			// The 10th byte may only hold bit 63.
			r.fail(start, num, "varint longer than 10 bytes or overflowing 64 bits")
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
}

// key reads a field key and returns the field number, the wire type and
// the key's offset. On error r.err is set and num is meaningless.
func (r *reader) key() (num, wt uint64, at int) {
	// Fields 1-15 have one-byte keys.
	if at = r.i; at < len(r.b) {
		if c := r.b[at]; c < 0x80 && c >= 1<<3 {
			r.i = at + 1
			return uint64(c >> 3), uint64(c & 7), at
		}
	}
	return r.keySlow()
}

func (r *reader) keySlow() (num, wt uint64, at int) {
	at = r.i
	k := r.varint(0)
	num, wt = k>>3, k&7
	if r.err == nil && (num == 0 || num > 1<<29-1) {
		r.fail(at, 0, "invalid field number %d in key %#x", num, k)
	}
	return num, wt, at
}

// wireTypeErr reports a known field that arrived with another wire type than
// the one it is declared with.
func (r *reader) wireTypeErr(num, wt, want uint64, at int) {
	r.fail(at, num, "wire type %d (%s), want %d (%s)", wt, wireTypeNames[wt], want, wireTypeNames[want])
}

// scalar reads the value of varint field num, whose key (at offset at) had
// wire type wt.
func (r *reader) scalar(num, wt uint64, at int) uint64 {
	if wt != wireVarint {
		r.wireTypeErr(num, wt, wireVarint, at)
		return 0
	}
	return r.varint(num)
}

// int32 reads an int32 field. protobuf keeps the low 32 bits of the varint,
// which also undoes the sign extension of negative values.
func (r *reader) int32(num, wt uint64, at int) int32 { return int32(r.scalar(num, wt, at)) }

// payload reads the value of length-delimited field num and returns it
// (aliasing the input) with its offset in r.b.
func (r *reader) payload(num, wt uint64, at int) ([]byte, int) {
	if wt != wireBytes {
		r.wireTypeErr(num, wt, wireBytes, at)
		return nil, r.i
	}
	return r.lengthDelimited(num)
}

func (r *reader) lengthDelimited(num uint64) ([]byte, int) {
	lenAt := r.i
	n := r.varint(num)
	if rem := len(r.b) - r.i; n > uint64(rem) {
		r.fail(lenAt, num, "length %d exceeds the %d byte(s) left in the %s", n, rem, r.what())
		return nil, r.i
	}
	start := r.i
	r.i += int(n)
	return r.b[start:r.i], start
}

// skip skips the value of an unknown field whose key was at offset at.
// Unknown fields are legal protobuf (C++ skips our extensions the same way),
// so only malformed ones are errors.
func (r *reader) skip(num, wt uint64, at int, depth int) {
	switch wt {
	case wireVarint:
		r.varint(num)
	case wireFixed64, wireFixed32:
		n := 8
		if wt == wireFixed32 {
			n = 4
		}
		if len(r.b)-r.i < n {
			r.fail(at, num, "truncated %s value: %d byte(s) left", wireTypeNames[wt], len(r.b)-r.i)
			return
		}
		r.i += n
	case wireBytes:
		r.lengthDelimited(num)
	case wireStartGroup:
		// Groups are deprecated but still valid protobuf; skipping one means
		// skipping fields up to the matching end-group key.
		if depth >= maxGroupDepth {
			r.fail(at, num, "groups nested deeper than %d", maxGroupDepth)
			return
		}
		for r.err == nil {
			if r.i >= len(r.b) {
				r.fail(at, num, "group not terminated before end of %s", r.what())
				return
			}
			n, w, a := r.key()
			if r.err != nil {
				return
			}
			if w == wireEndGroup {
				if n != num {
					r.fail(a, n, "end-group for field %d closes group %d", n, num)
				}
				return
			}
			r.skip(n, w, a, depth+1)
		}
	case wireEndGroup:
		r.fail(at, num, "end-group without a matching start-group")
	default:
		r.fail(at, num, "invalid wire type %d", wt)
	}
}

// DecodeMeta decodes a dmlc PBMeta frame into m, overwriting every field.
//
// Absent fields get ps-lite's decode defaults: head, app_id, timestamp and
// customer_id become Empty, as do a node's id and port; Sender and Recver are
// not on the wire and are set to Empty for the transport to fill. Unknown
// fields are skipped, data_type is accepted packed or unpacked, repeated
// scalars follow protobuf's last-one-wins rule, and a repeated control field
// is merged as protobuf does.
//
// The result is normalised to what MarshalTo can express, so that decoding
// its output yields the same Meta: a control whose cmd is EMPTY is dropped
// (ps-lite treats such a message as data anyway), barrier_group is kept only
// for BARRIER and msg_sig only for ACK, and data_size is checked but not
// stored (the van never sends it; the transport derives it from the frames).
//
// The input is not retained: strings and Body are copied, so the transport
// may reuse its buffer. To keep steady-state decoding allocation-free, the
// backing arrays of m.DataType and m.Control.Nodes are reused; a caller that
// keeps those slices past the next DecodeMeta into the same m must copy them.
// Body is always freshly allocated (when non-empty) because applications
// commonly hold on to it.
//
// Malformed input yields a *DecodeError and leaves m in an unspecified but
// valid state. The proto2 required fields control.cmd and node.role must be
// present, as C++ protobuf insists.
func DecodeMeta(b []byte, m *Meta) error {
	dt := m.DataType[:0]
	nodes := m.Control.Nodes[:0]
	*m = Meta{
		Head: Empty, AppID: Empty, CustomerID: Empty, Timestamp: Empty,
		Sender: Empty, Recver: Empty,
		DataType: dt,
	}
	m.Control.Nodes = nodes

	r := reader{b: b, msg: metaInfo, index: -1}
	ctrlAt, hasCmd := -1, false // offset of the first control field, if any
	for r.i < len(r.b) {
		num, wt, at := r.key()
		if r.err != nil {
			break
		}
		switch num {
		case fHead:
			m.Head = r.int32(num, wt, at)
		case fBody:
			p, _ := r.payload(num, wt, at)
			m.Body = nil
			if len(p) > 0 {
				m.Body = append([]byte(nil), p...)
			}
		case fControl:
			p, start := r.payload(num, wt, at)
			if r.err != nil {
				break
			}
			if ctrlAt < 0 {
				ctrlAt = at
			}
			cr := r.sub(p, start, controlInfo, -1)
			cr.control(&m.Control, &hasCmd)
			r.absorb(&cr)
		case fRequest:
			m.Request = r.scalar(num, wt, at) != 0
		case fPush:
			m.Push = r.scalar(num, wt, at) != 0
		case fSimpleApp:
			m.SimpleApp = r.scalar(num, wt, at) != 0
		case fAppID:
			m.AppID = r.int32(num, wt, at)
		case fTimestamp:
			m.Timestamp = r.int32(num, wt, at)
		case fDataType:
			r.dataType(&m.DataType, wt, at)
		case fCustomerID:
			m.CustomerID = r.int32(num, wt, at)
		case fDataSize:
			r.scalar(num, wt, at) // checked but not stored; see above
		case fPull:
			m.Pull = r.scalar(num, wt, at) != 0
		case fPriority:
			m.Priority = r.int32(num, wt, at)
		case fEpoch:
			m.Ext.Epoch = r.scalar(num, wt, at)
		case fSendNanos:
			m.Ext.SendNanos = int64(r.scalar(num, wt, at))
		case fRecvNanos:
			m.Ext.RecvNanos = int64(r.scalar(num, wt, at))
		case fHandleNano:
			m.Ext.HandleNano = int64(r.scalar(num, wt, at))
		case fPushSeq:
			m.Ext.PushSeq = r.scalar(num, wt, at)
		case fIteration:
			m.Ext.Iteration = int64(r.scalar(num, wt, at))
		case fRedirect:
			m.Ext.Redirect = r.scalar(num, wt, at) != 0
		case fRawKey:
			m.Raw.Key = r.scalar(num, wt, at)
		case fRawAddr:
			m.Raw.Addr = r.scalar(num, wt, at)
		case fRawValLen:
			m.Raw.ValLen = r.int32(num, wt, at)
		case fRawOption:
			m.Raw.Option = r.int32(num, wt, at)
		default:
			r.skip(num, wt, at, 0)
		}
	}
	if r.err != nil {
		return r.err
	}
	if ctrlAt >= 0 && !hasCmd {
		return &DecodeError{Offset: ctrlAt, Field: "control.cmd (1)", Reason: "required field missing"}
	}
	c := &m.Control
	if c.Cmd == CmdEmpty {
		*c = Control{Nodes: c.Nodes[:0]}
	}
	if !c.Cmd.isBarrier() {
		c.BarrierGroup = 0
	}
	if c.Cmd != CmdAck {
		c.MsgSig = 0
	}
	return nil
}

// dataType appends one data_type occurrence, packed or not, to *dt.
func (r *reader) dataType(dt *[]DataType, wt uint64, at int) {
	switch wt {
	case wireVarint:
		v := r.varint(fDataType)
		if r.err != nil {
			return
		}
		if len(*dt) >= MaxDataTypes {
			r.fail(at, fDataType, "more than %d entries", MaxDataTypes)
			return
		}
		*dt = append(*dt, DataType(int32(v)))
	case wireBytes:
		p, start := r.lengthDelimited(fDataType)
		// Every element ends in exactly one byte below 0x80, so counting
		// those bytes both enforces the limit before allocating and sizes
		// the slice in one step.
		n := 0
		for _, c := range p {
			if c < 0x80 {
				n++
			}
		}
		if len(*dt)+n > MaxDataTypes {
			r.fail(at, fDataType, "more than %d entries", MaxDataTypes)
			return
		}
		*dt = slices.Grow(*dt, n)
		pr := r.sub(p, start, dataTypeInfo, -1)
		for pr.i < len(pr.b) {
			v := pr.varint(fDataType)
			if pr.err != nil {
				break
			}
			*dt = append(*dt, DataType(int32(v)))
		}
		r.absorb(&pr)
	default:
		r.fail(at, fDataType, "wire type %d (%s), want 2 (packed bytes) or 0 (varint)", wt, wireTypeNames[wt])
	}
}

// control decodes one PBControl occurrence into c, merging with what earlier
// occurrences set. *hasCmd records whether any occurrence carried cmd.
func (r *reader) control(c *Control, hasCmd *bool) {
	for r.i < len(r.b) {
		num, wt, at := r.key()
		if r.err != nil {
			return
		}
		switch num {
		case fCtrlCmd:
			c.Cmd = Command(r.int32(num, wt, at))
			*hasCmd = true
		case fCtrlNode:
			p, start := r.payload(num, wt, at)
			if r.err != nil {
				return
			}
			if len(c.Nodes) >= MaxNodes {
				r.fail(at, num, "more than %d nodes", MaxNodes)
				return
			}
			// Each occurrence of a repeated message field is a new element.
			c.Nodes = append(c.Nodes, Node{})
			nr := r.sub(p, start, nodeInfo, len(c.Nodes)-1)
			nr.node(&c.Nodes[len(c.Nodes)-1])
			r.absorb(&nr)
		case fCtrlBarrierGroup:
			c.BarrierGroup = r.int32(num, wt, at)
		case fCtrlMsgSig:
			c.MsgSig = r.scalar(num, wt, at)
		default:
			r.skip(num, wt, at, 0)
		}
	}
}

// node decodes one PBNode into n.
func (r *reader) node(n *Node) {
	*n = Node{ID: Empty, Port: Empty}
	hasRole := false
	for r.i < len(r.b) {
		num, wt, at := r.key()
		if r.err != nil {
			return
		}
		switch num {
		case fNodeRole:
			n.Role = Role(r.int32(num, wt, at))
			hasRole = true
		case fNodeID:
			n.ID = r.int32(num, wt, at)
		case fNodeHostname:
			p, _ := r.payload(num, wt, at)
			n.Hostname = string(p) // a copy: the input buffer may be reused
		case fNodePort:
			n.Port = r.int32(num, wt, at)
		case fNodeIsRecovery:
			n.IsRecovery = r.scalar(num, wt, at) != 0
		case fNodeCustomerID:
			n.CustomerID = r.int32(num, wt, at)
		case fNodeStandby:
			n.Standby = r.scalar(num, wt, at) != 0
		case fNodeWantRank:
			if v := r.int32(num, wt, at); v >= 0 && v < MaxNodes {
				n.WantRank = v + 1
			} else if r.err == nil {
				r.fail(at, num, "preferred rank %d, want 0 to %d", v, MaxNodes-1)
			}
		default:
			r.skip(num, wt, at, 0)
		}
	}
	if !hasRole {
		r.fail(len(r.b), fNodeRole, "required field missing")
	}
}

// ErrFrameCount is wrapped by CheckFrames's errors.
var ErrFrameCount = errors.New("message: data frame count does not match meta data_type")

// CheckFrames reports whether nframes data frames (the frames after the meta)
// agree with m. ps-lite tags every data frame with one data_type entry and
// has no other frame count on the wire, so a mismatch means a corrupt or
// truncated message, which must not be handed to the application.
func CheckFrames(m *Meta, nframes int) error {
	if nframes == len(m.DataType) {
		return nil
	}
	return fmt.Errorf("%w: meta lists %d data_type entries %v but %d data frame(s) arrived",
		ErrFrameCount, len(m.DataType), m.DataType, nframes)
}
