package message

// This file is the meta codec of the BytePS fork of ps-lite (bytedance/ps-lite
// at a848f53, the layout BytePS master uses): the meta frame is the C struct
// RawMeta copied as it is in memory (x86-64, little-endian), followed by the
// body, the data types and one RawNode per control node. There is no
// versioning and no presence: every field is always there.
//
//	RawMeta (112 B) | body (body_size B) | int32 data_type[data_type_size] | RawNode[node_size] (552 B each)
//
// Where dmlc's Meta has no counterpart (pull, priority, the elasticps
// extensions, a node's standby flag), this codec uses bytes the fork zeroes
// and never reads, so that what the fork sends decodes exactly and what it
// receives from us parses as it would from a fork node:
//
//   - byte 70 (padding after simple_app) holds flags: rawPullSet when pull is
//     not what the fork infers (it has no pull field; a data message that
//     is not a push is a pull), with rawPullOn its value, and rawTrailer
//     when a trailer follows the nodes;
//   - bytes 108-111 (padding after sid) hold priority;
//   - the trailer (only when some extension field is set) holds Ext and one
//     standby byte per node. The fork computes the offsets of what it reads
//     from the sizes in RawMeta and ignores what follows.

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// RawFields are the BytePS fork's RawMeta fields that dmlc's Meta lacks.
// They travel verbatim on the bytedance wire; the dmlc wire carries Key,
// Addr, ValLen and Option (extension fields 21-24) and zeroes the rest. The
// fork's KVWorker fills them for KV requests (Addr and ValLen describe its
// value buffer, the devices are CPU(1)/0) and its KVServer echoes Key, Addr,
// ValLen and Option in responses; its ZeroMQ van does not read them.
type RawFields struct {
	SrcDevType, SrcDevID int32
	DstDevType, DstDevID int32
	Key, Addr            uint64
	ValLen, Option, SID  int32
}

// Sizes of the fork's structs.
const (
	// RawMetaSize is the size of the fork's RawMeta struct.
	RawMetaSize = 112
	// RawNodeSize is the size of the fork's RawNode struct.
	RawNodeSize = 552
	// rawHostnameSize is RawNode.hostname's char array (NUL-terminated).
	rawHostnameSize = 64
	rawMaxPorts     = 32
	rawEndpointSize = 64
	// rawTrailerSize is the fixed part of the elasticps trailer (Ext); one
	// standby byte per node follows it.
	rawTrailerSize = 56
)

// rawEmpty is the fork's Meta::kEmpty and Node::kEmpty (SHRT_MAX, where dmlc
// uses INT_MAX).
const rawEmpty = 32767

// RawMeta offsets.
const (
	rHead         = 0
	rBodySize     = 4
	rCmd          = 8
	rNodeSize     = 12
	rBarrierGroup = 16
	rMsgSig       = 24
	rRequest      = 32
	rAppID        = 36
	rTimestamp    = 40
	rDataTypeSize = 44
	rSrcDevType   = 48
	rSrcDevID     = 52
	rDstDevType   = 56
	rDstDevID     = 60
	rCustomerID   = 64
	rPush         = 68
	rSimpleApp    = 69
	rFlags        = 70 // elasticps, in the fork's padding
	rDataSize     = 72
	rKey          = 80
	rAddr         = 88
	rValLen       = 96
	rOption       = 100
	rSID          = 104
	rPriority     = 108 // elasticps, in the fork's padding
)

// RawNode offsets, relative to the node.
const (
	nRole            = 0
	nID              = 4
	nHostname        = 8
	nNumPorts        = 72
	nPorts           = 76
	nPort            = 204
	nIsRecovery      = 464
	nCustomerID      = 468
	nEndpointNameLen = 536
	nAuxID           = 544
)

// Flags in byte rFlags.
const (
	rawPullSet  = 1 << 0
	rawPullOn   = 1 << 1
	rawTrailer  = 1 << 2
	rawFlagsAll = rawPullSet | rawPullOn | rawTrailer
)

var le = binary.LittleEndian

// inferredPull is what the fork, which has no pull flag, means: a data
// message that is not a push is a pull.
func (m *Meta) inferredPull() bool {
	return m.Control.Cmd == CmdEmpty && !m.SimpleApp && !m.Push
}

// hasRawTrailer reports whether m needs the elasticps trailer.
func (m *Meta) hasRawTrailer() bool {
	if m.Ext != (Ext{}) {
		return true
	}
	for i := range m.Control.Nodes {
		if m.Control.Nodes[i].Standby {
			return true
		}
	}
	return false
}

// RawEncodedLen returns the number of bytes AppendRaw appends for m.
func (m *Meta) RawEncodedLen() int {
	n := RawMetaSize + len(m.Body) + 4*len(m.DataType) + RawNodeSize*len(m.Control.Nodes)
	if m.hasRawTrailer() {
		n += rawTrailerSize + len(m.Control.Nodes)
	}
	return n
}

// rawInt maps Empty to the fork's kEmpty.
func rawInt(v int32) uint32 {
	if v == Empty {
		return rawEmpty
	}
	return uint32(v)
}

// rawHeaderInt is rawInt for head, app_id, customer_id and timestamp: as
// DecodeRawMeta reads kEmpty back as Empty only in control messages, a
// data message's Empty goes out as it is, so that it comes back the same.
func rawHeaderInt(v int32, ctrl bool) uint32 {
	if ctrl {
		return rawInt(v)
	}
	return uint32(v)
}

func rawBool(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// rawCheck reports what in m the bytedance wire cannot carry.
func (m *Meta) rawCheck() error {
	switch {
	case len(m.Body) > 1<<31-1:
		return fmt.Errorf("message: cannot encode the meta for the bytedance wire: body of %d bytes exceeds int32", len(m.Body))
	case len(m.DataType) > MaxDataTypes:
		return fmt.Errorf("message: cannot encode the meta for the bytedance wire: %d data types, at most %d", len(m.DataType), MaxDataTypes)
	case len(m.Control.Nodes) > MaxNodes:
		return fmt.Errorf("message: cannot encode the meta for the bytedance wire: %d nodes, at most %d", len(m.Control.Nodes), MaxNodes)
	}
	for i := range m.Control.Nodes {
		h := m.Control.Nodes[i].Hostname
		if len(h) >= rawHostnameSize {
			return fmt.Errorf("message: cannot encode the meta for the bytedance wire: control.node[%d].hostname %q is %d bytes; the fork's RawNode holds at most %d",
				i, h, len(h), rawHostnameSize-1)
		}
		for j := 0; j < len(h); j++ {
			if h[j] == 0 {
				return fmt.Errorf("message: cannot encode the meta for the bytedance wire: control.node[%d].hostname %q contains a NUL byte", i, h)
			}
		}
	}
	return nil
}

// AppendRaw appends the bytedance RawMeta encoding of m to dst and returns
// the extended slice. It allocates only if dst lacks capacity for
// RawEncodedLen bytes. It fails, appending nothing, only for what the fork's
// structs cannot hold: a hostname of 64 bytes or more (or with a NUL), more
// than MaxNodes nodes or MaxDataTypes data types.
//
// Everything the fork leaves uninitialised (ports beyond the first, device
// arrays, endpoint names, padding) is written as zeros; a node has one port
// and its preferred rank in aux_id (-1: none). Empty becomes the fork's kEmpty
// (32767). Sender and Recver are not written.
func (m *Meta) AppendRaw(dst []byte) ([]byte, error) {
	if err := m.rawCheck(); err != nil {
		return dst, err
	}
	start := len(dst)
	n := m.RawEncodedLen()
	dst = slices.Grow(dst, n)[:start+n]
	b := dst[start:]
	clear(b)
	c := &m.Control
	le.PutUint32(b[rHead:], rawHeaderInt(m.Head, c.Cmd != CmdEmpty))
	le.PutUint32(b[rBodySize:], uint32(len(m.Body)))
	le.PutUint32(b[rCmd:], uint32(c.Cmd))
	le.PutUint32(b[rNodeSize:], uint32(len(c.Nodes)))
	le.PutUint32(b[rBarrierGroup:], uint32(c.BarrierGroup))
	le.PutUint64(b[rMsgSig:], c.MsgSig)
	b[rRequest] = rawBool(m.Request)
	le.PutUint32(b[rAppID:], rawHeaderInt(m.AppID, c.Cmd != CmdEmpty))
	le.PutUint32(b[rTimestamp:], rawHeaderInt(m.Timestamp, c.Cmd != CmdEmpty))
	le.PutUint32(b[rDataTypeSize:], uint32(len(m.DataType)))
	r := &m.Raw
	le.PutUint32(b[rSrcDevType:], uint32(r.SrcDevType))
	le.PutUint32(b[rSrcDevID:], uint32(r.SrcDevID))
	le.PutUint32(b[rDstDevType:], uint32(r.DstDevType))
	le.PutUint32(b[rDstDevID:], uint32(r.DstDevID))
	le.PutUint32(b[rCustomerID:], rawHeaderInt(m.CustomerID, c.Cmd != CmdEmpty))
	b[rPush] = rawBool(m.Push)
	b[rSimpleApp] = rawBool(m.SimpleApp)
	var flags byte
	if m.Pull != m.inferredPull() {
		flags |= rawPullSet
		if m.Pull {
			flags |= rawPullOn
		}
	}
	trailer := m.hasRawTrailer()
	if trailer {
		flags |= rawTrailer
	}
	b[rFlags] = flags
	le.PutUint32(b[rDataSize:], uint32(m.DataSize))
	le.PutUint64(b[rKey:], r.Key)
	le.PutUint64(b[rAddr:], r.Addr)
	le.PutUint32(b[rValLen:], uint32(r.ValLen))
	le.PutUint32(b[rOption:], uint32(r.Option))
	le.PutUint32(b[rSID:], uint32(r.SID))
	le.PutUint32(b[rPriority:], uint32(m.Priority))

	off := RawMetaSize + copy(b[RawMetaSize:], m.Body)
	for _, t := range m.DataType {
		le.PutUint32(b[off:], uint32(t))
		off += 4
	}
	for i := range c.Nodes {
		nd := &c.Nodes[i]
		p := b[off : off+RawNodeSize]
		le.PutUint32(p[nRole:], uint32(nd.Role))
		le.PutUint32(p[nID:], rawInt(nd.ID))
		copy(p[nHostname:nHostname+rawHostnameSize], nd.Hostname)
		le.PutUint32(p[nNumPorts:], 1)
		le.PutUint32(p[nPorts:], rawInt(nd.Port))
		le.PutUint32(p[nPort:], rawInt(nd.Port))
		p[nIsRecovery] = rawBool(nd.IsRecovery)
		le.PutUint32(p[nCustomerID:], uint32(nd.CustomerID))
		le.PutUint32(p[nAuxID:], uint32(nd.WantRank-1)) // -1: no preferred rank
		off += RawNodeSize
	}
	if trailer {
		p := b[off:]
		e := &m.Ext
		le.PutUint64(p[0:], e.Epoch)
		le.PutUint64(p[8:], uint64(e.SendNanos))
		le.PutUint64(p[16:], uint64(e.RecvNanos))
		le.PutUint64(p[24:], uint64(e.HandleNano))
		le.PutUint64(p[32:], e.PushSeq)
		le.PutUint64(p[40:], uint64(e.Iteration))
		p[48] = rawBool(e.Redirect)
		for i := range c.Nodes {
			p[rawTrailerSize+i] = rawBool(c.Nodes[i].Standby)
		}
	}
	return dst, nil
}

// EncodeRawMeta returns the bytedance RawMeta encoding of m in a new slice
// of exactly the right size. See AppendRaw for the rules.
func EncodeRawMeta(m *Meta) ([]byte, error) {
	return m.AppendRaw(make([]byte, 0, m.RawEncodedLen()))
}

// rawErr is a *DecodeError about the bytedance frame.
func rawErr(off int, field, format string, args ...any) error {
	return &DecodeError{Offset: off, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// rawI32 reads an int32 at off.
func rawI32(b []byte, off int) int32 { return int32(le.Uint32(b[off:])) }

// rawBoolAt reads a C++ bool at off, which must be 0 or 1 (anything else
// is not a bool the fork wrote); ok is false otherwise.
func rawBoolAt(b []byte, off int) (v, ok bool) { return b[off] == 1, b[off] <= 1 }

// rawBoolErr reports a bad bool byte at absolute offset off.
func rawBoolErr(off int, field string, v byte) error {
	return rawErr(off, field, "bool byte is %d, want 0 or 1", v)
}

// DecodeRawMeta decodes a bytedance RawMeta frame into m, overwriting every
// field. The frame's length must be exactly what its sizes (body_size,
// data_type_size, node_size, and the elasticps trailer flag) add up to.
//
// In control messages (cmd != EMPTY) the fork's kEmpty (32767) in head,
// app_id, customer_id and timestamp becomes Empty, as does a node id of
// 32767 in every message; data messages keep their values as sent (a
// timestamp may reach 32767 in a long job). pull is the flag in the
// elasticps padding byte when set there, else the fork's meaning (a data
// message that is not a push). A node's extra ports, devices, endpoint name
// are checked but not stored; aux_id (the preferred rank) is
// Node.WantRank.
//
// As DecodeMeta: the input is not retained (Body and hostnames are copied;
// a hostname equal to the one already in the reused node is kept, so a
// steady stream of heartbeats does not allocate), the backing arrays of
// m.DataType and m.Control.Nodes are reused, and malformed input yields a
// *DecodeError and leaves m in an unspecified but valid state.
func DecodeRawMeta(b []byte, m *Meta) error {
	dt := m.DataType[:0]
	nodes := m.Control.Nodes[:0]
	*m = Meta{Sender: Empty, Recver: Empty, DataType: dt}
	m.Control.Nodes = nodes

	if len(b) < RawMetaSize {
		return rawErr(len(b), "", "frame of %d bytes is shorter than the fork's %d-byte RawMeta", len(b), RawMetaSize)
	}
	bodySize := rawI32(b, rBodySize)
	if bodySize < 0 {
		return rawErr(rBodySize, "body_size", "negative (%d)", bodySize)
	}
	ndt := rawI32(b, rDataTypeSize)
	if ndt < 0 || ndt > MaxDataTypes {
		return rawErr(rDataTypeSize, "data_type_size", "%d, want 0 to %d", ndt, MaxDataTypes)
	}
	nnodes := rawI32(b, rNodeSize)
	if nnodes < 0 || nnodes > MaxNodes {
		return rawErr(rNodeSize, "control.node_size", "%d, want 0 to %d", nnodes, MaxNodes)
	}
	flags := b[rFlags]
	if flags&^rawFlagsAll != 0 {
		return rawErr(rFlags, "padding byte 70", "%#x holds unknown elasticps flags (known: %#x)", flags, rawFlagsAll)
	}
	if flags&rawPullSet == 0 && flags&rawPullOn != 0 {
		return rawErr(rFlags, "padding byte 70", "pull value flag without the pull-set flag (%#x)", flags)
	}
	trailer := flags&rawTrailer != 0
	nodesAt := RawMetaSize + int64(bodySize) + 4*int64(ndt)
	want := nodesAt + RawNodeSize*int64(nnodes)
	if trailer {
		want += rawTrailerSize + int64(nnodes)
	}
	if int64(len(b)) != want {
		at := len(b)
		if want < int64(len(b)) {
			at = int(want)
		}
		return rawErr(at, "", "frame is %d bytes but its sizes (body_size=%d, data_type_size=%d, node_size=%d, trailer=%v) make %d",
			len(b), bodySize, ndt, nnodes, trailer, want)
	}

	var ok bool
	for _, f := range [...]struct {
		v    *bool
		off  int
		name string
	}{{&m.Request, rRequest, "request"}, {&m.Push, rPush, "push"}, {&m.SimpleApp, rSimpleApp, "simple_app"}} {
		if *f.v, ok = rawBoolAt(b, f.off); !ok {
			return rawBoolErr(f.off, f.name, b[f.off])
		}
	}
	c := &m.Control
	c.Cmd = Command(rawI32(b, rCmd))
	c.BarrierGroup = rawI32(b, rBarrierGroup)
	c.MsgSig = le.Uint64(b[rMsgSig:])
	m.Head = rawI32(b, rHead)
	m.AppID = rawI32(b, rAppID)
	m.Timestamp = rawI32(b, rTimestamp)
	m.CustomerID = rawI32(b, rCustomerID)
	if c.Cmd != CmdEmpty {
		for _, v := range [...]*int32{&m.Head, &m.AppID, &m.Timestamp, &m.CustomerID} {
			if *v == rawEmpty {
				*v = Empty
			}
		}
	}
	m.Raw = RawFields{
		SrcDevType: rawI32(b, rSrcDevType), SrcDevID: rawI32(b, rSrcDevID),
		DstDevType: rawI32(b, rDstDevType), DstDevID: rawI32(b, rDstDevID),
		Key: le.Uint64(b[rKey:]), Addr: le.Uint64(b[rAddr:]),
		ValLen: rawI32(b, rValLen), Option: rawI32(b, rOption), SID: rawI32(b, rSID),
	}
	m.DataSize = rawI32(b, rDataSize)
	m.Priority = rawI32(b, rPriority)
	if flags&rawPullSet != 0 {
		m.Pull = flags&rawPullOn != 0
	} else {
		m.Pull = m.inferredPull()
	}

	off := RawMetaSize
	if bodySize > 0 {
		m.Body = append([]byte(nil), b[off:off+int(bodySize)]...)
		off += int(bodySize)
	}
	for range ndt {
		m.DataType = append(m.DataType, DataType(rawI32(b, off)))
		off += 4
	}
	if err := decodeRawNodes(b, int(nodesAt), int(nnodes), c); err != nil {
		return err
	}
	off = int(nodesAt) + RawNodeSize*int(nnodes)
	if trailer {
		return decodeRawTrailer(b, off, m)
	}
	return nil
}

// decodeRawNodes decodes n RawNodes starting at off into c.Nodes, reusing
// its backing array (and the hostnames in it, when equal).
func decodeRawNodes(b []byte, off, n int, c *Control) error {
	old := c.Nodes[:cap(c.Nodes)]
	if n > len(old) {
		old = slices.Grow(c.Nodes[:0], n)[:n]
	}
	nodes := old[:n]
	for i := range nodes {
		p := b[off : off+RawNodeSize]
		// Formatted on the error path only, so decoding does not allocate.
		field := func(name string) string { return fmt.Sprintf("control.node[%d].%s", i, name) }
		h := p[nHostname : nHostname+rawHostnameSize]
		hl := 0
		for hl < len(h) && h[hl] != 0 {
			hl++
		}
		if hl == len(h) {
			return rawErr(off+nHostname, field("hostname"), "no NUL within its %d bytes", rawHostnameSize)
		}
		np := rawI32(p, nNumPorts)
		if np < 0 || np > rawMaxPorts {
			return rawErr(off+nNumPorts, field("num_ports"), "%d, want 0 to %d", np, rawMaxPorts)
		}
		rec, ok := rawBoolAt(p, nIsRecovery)
		if !ok {
			return rawBoolErr(off+nIsRecovery, field("is_recovery"), p[nIsRecovery])
		}
		if el := le.Uint64(p[nEndpointNameLen:]); el > rawEndpointSize {
			return rawErr(off+nEndpointNameLen, field("endpoint_name_len"), "%d, longer than the %d-byte endpoint_name", el, rawEndpointSize)
		}
		nd := &nodes[i]
		host := nd.Hostname
		if host != string(h[:hl]) {
			host = string(h[:hl])
		}
		id := rawI32(p, nID)
		if id == rawEmpty {
			id = Empty
		}
		aux := rawI32(p, nAuxID)
		if aux < -1 || aux >= MaxNodes {
			return rawErr(off+nAuxID, field("aux_id"), "preferred rank %d, want -1 (none) or 0 to %d", aux, MaxNodes-1)
		}
		*nd = Node{
			Role:       Role(rawI32(p, nRole)),
			ID:         id,
			CustomerID: rawI32(p, nCustomerID),
			Hostname:   host,
			Port:       rawI32(p, nPort),
			IsRecovery: rec,
			WantRank:   aux + 1,
		}
		off += RawNodeSize
	}
	c.Nodes = nodes
	return nil
}

// decodeRawTrailer decodes the elasticps trailer at off into m.
func decodeRawTrailer(b []byte, off int, m *Meta) error {
	p := b[off:]
	if p[48] > 1 {
		return rawBoolErr(off+48, "trailer.redirect", p[48])
	}
	for i := 49; i < rawTrailerSize; i++ {
		if p[i] != 0 {
			return rawErr(off+i, "trailer", "padding byte %d is %#x, want 0", i, p[i])
		}
	}
	m.Ext = Ext{
		Epoch:      le.Uint64(p[0:]),
		SendNanos:  int64(le.Uint64(p[8:])),
		RecvNanos:  int64(le.Uint64(p[16:])),
		HandleNano: int64(le.Uint64(p[24:])),
		PushSeq:    le.Uint64(p[32:]),
		Iteration:  int64(le.Uint64(p[40:])),
		Redirect:   p[48] == 1,
	}
	for i := range m.Control.Nodes {
		v := p[rawTrailerSize+i]
		if v > 1 {
			return rawBoolErr(off+rawTrailerSize+i, fmt.Sprintf("trailer.standby[%d]", i), v)
		}
		m.Control.Nodes[i].Standby = v == 1
	}
	return nil
}
