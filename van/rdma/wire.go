//go:build rdma && cgo

package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// An image is what one write puts into a receiver's slot:
//
//	header (hdrSize bytes) | frame lengths (8 bytes each) | meta | frames...
//
// All integers are little-endian. The header names the receiver's link so a
// write is checked against the slot's owner, numbers the message within its
// link (delivery order), and may carry a landing slot offered for the
// response (requests) and a cached slot handed back to the requester
// (responses).
const (
	hdrSize    = 128
	hdrMagic   = 0x52535045 // "EPSR"
	hdrVersion = 1

	flagLanding = 1 << 0 // landing fields are valid
	flagGrant   = 1 << 1 // grant fields are valid
)

// remoteSlot is a receive buffer of a peer that we may write into: its
// index (the write's immediate data), address as the peer's provider wants
// it, remote key and capacity in bytes.
type remoteSlot struct {
	idx  uint32
	addr uint64
	rkey uint64
	cap  uint64
}

type header struct {
	flags   uint16
	link    uint32 // receiver's link id
	seq     uint32
	metaLen uint32
	nframes uint32
	total   uint64 // image bytes, header included
	landing remoteSlot
	grant   remoteSlot
	// grantLink is the grantor's id of the link the granted slot belongs
	// to, which is the peer's outgoing link: it must match there.
	grantLink uint32
}

func (h *header) put(b []byte) {
	_ = b[hdrSize-1]
	clear(b[:hdrSize])
	le := binary.LittleEndian
	le.PutUint32(b[0:], hdrMagic)
	le.PutUint16(b[4:], hdrVersion)
	le.PutUint16(b[6:], h.flags)
	le.PutUint32(b[8:], h.link)
	le.PutUint32(b[12:], h.seq)
	le.PutUint32(b[16:], h.metaLen)
	le.PutUint32(b[20:], h.nframes)
	le.PutUint64(b[24:], h.total)
	putSlot(b[32:], h.landing)
	putSlot(b[64:], h.grant)
	le.PutUint32(b[96:], h.grantLink)
}

func putSlot(b []byte, s remoteSlot) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], s.idx)
	le.PutUint64(b[8:], s.addr)
	le.PutUint64(b[16:], s.rkey)
	le.PutUint64(b[24:], s.cap)
}

func getSlot(b []byte) remoteSlot {
	le := binary.LittleEndian
	return remoteSlot{idx: le.Uint32(b[0:]), addr: le.Uint64(b[8:]), rkey: le.Uint64(b[16:]), cap: le.Uint64(b[24:])}
}

var errBadHeader = errors.New("bad image header")

// parseHeader decodes a header; the caller checks it against the slot.
func parseHeader(b []byte) (header, error) {
	var h header
	if len(b) < hdrSize {
		return h, errBadHeader
	}
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != hdrMagic {
		return h, fmt.Errorf("%w: magic %#x", errBadHeader, le.Uint32(b[0:]))
	}
	if v := le.Uint16(b[4:]); v != hdrVersion {
		return h, fmt.Errorf("%w: version %d, want %d", errBadHeader, v, hdrVersion)
	}
	h.flags = le.Uint16(b[6:])
	h.link = le.Uint32(b[8:])
	h.seq = le.Uint32(b[12:])
	h.metaLen = le.Uint32(b[16:])
	h.nframes = le.Uint32(b[20:])
	h.total = le.Uint64(b[24:])
	h.landing = getSlot(b[32:])
	h.grant = getSlot(b[64:])
	h.grantLink = le.Uint32(b[96:])
	return h, nil
}

// Control messages (two-sided sends of exactly ctrlSize bytes) carry the
// rendezvous.
const (
	ctrlSize  = 64
	ctrlMagic = 0x5043 // "CP"

	ctrlStart = 1 // sender -> receiver: I need a slot of size bytes
	ctrlReply = 2 // receiver -> sender: here it is (or why not)

	startWantCache = 1 << 0 // bind the slot to (key, kind) of the link
	replyCached    = 1 << 0 // the slot is bound: keep it for the key

	replyOK       = 0
	replyTooBig   = 1 // the image exceeds the receiver's limits
	replyNoMemory = 2 // the receiver cannot register memory
)

// ctrlMsg is START or REPLY.
type ctrlMsg struct {
	typ   uint8
	flags uint8
	link  uint32 // the receiver's id of the link
	token uint64 // sender's rendezvous id, echoed by REPLY

	// START
	size    uint64
	key     chanKey
	replace uint32 // slot index + 1 that the bound slot supersedes, or 0

	// REPLY
	slot   remoteSlot
	status uint32
}

func (m *ctrlMsg) put(b *[ctrlSize]byte) {
	clear(b[:])
	le := binary.LittleEndian
	le.PutUint16(b[0:], ctrlMagic)
	b[2] = m.typ
	b[3] = m.flags
	le.PutUint32(b[4:], m.link)
	le.PutUint64(b[8:], m.token)
	switch m.typ {
	case ctrlStart:
		le.PutUint64(b[16:], m.size)
		le.PutUint64(b[24:], m.key.key)
		b[32] = m.key.kind
		le.PutUint32(b[36:], m.replace)
	case ctrlReply:
		le.PutUint32(b[16:], m.status)
		putSlot(b[24:], m.slot)
	}
}

func parseCtrl(b []byte) (ctrlMsg, error) {
	var m ctrlMsg
	le := binary.LittleEndian
	if len(b) < ctrlSize || le.Uint16(b[0:]) != ctrlMagic {
		return m, errors.New("bad control message")
	}
	m.typ, m.flags = b[2], b[3]
	m.link = le.Uint32(b[4:])
	m.token = le.Uint64(b[8:])
	switch m.typ {
	case ctrlStart:
		m.size = le.Uint64(b[16:])
		m.key = chanKey{key: le.Uint64(b[24:]), kind: b[32]}
		m.replace = le.Uint32(b[36:])
	case ctrlReply:
		m.status = le.Uint32(b[16:])
		m.slot = getSlot(b[24:])
	default:
		return m, fmt.Errorf("bad control message type %d", m.typ)
	}
	return m, nil
}

// chanKey names a cached channel of a link: a KV key and what the request
// does with it (kind: bit 0 push, bit 1 pull).
type chanKey struct {
	key  uint64
	kind uint8
}
