// Package message defines the data model of the ps-lite protocol (Meta, Node,
// Control, Message) and its wire codecs. It does no IO.
package message

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Empty is ps-lite's Meta::kEmpty / Node::kEmpty for the dmlc generation:
// the value of an unset integer field, and what appears on the wire for it.
const Empty int32 = math.MaxInt32

// Role is a node's role (ps::Node::Role).
type Role int32

// Roles, with ps-lite's numeric values.
const (
	RoleServer    Role = 0
	RoleWorker    Role = 1
	RoleScheduler Role = 2
)

func (r Role) String() string {
	switch r {
	case RoleServer:
		return "server"
	case RoleWorker:
		return "worker"
	case RoleScheduler:
		return "scheduler"
	}
	return fmt.Sprintf("role(%d)", int32(r))
}

// ParseRole maps DMLC_ROLE's values to a Role.
func ParseRole(s string) (Role, error) {
	switch strings.ToLower(s) {
	case "server":
		return RoleServer, nil
	case "worker":
		return RoleWorker, nil
	case "scheduler":
		return RoleScheduler, nil
	}
	return 0, fmt.Errorf("unknown role %q: expected worker, server or scheduler", s)
}

// Group ids: bit-ORs of these select sets of nodes (3, 5, 6, 7 are unions).
const (
	SchedulerGroup = 1
	ServerGroup    = 2
	WorkerGroup    = 4
	AllGroup       = SchedulerGroup | ServerGroup | WorkerGroup
)

// SchedulerID is the scheduler's fixed node id.
const SchedulerID = 1

// ServerRankToID, WorkerRankToID and IDToRank are ps-lite's id arithmetic.
func ServerRankToID(rank int) int { return rank*2 + 8 }

// WorkerRankToID maps a worker rank to its node id.
func WorkerRankToID(rank int) int { return rank*2 + 9 }

// IDToRank maps a server or worker id back to its rank.
func IDToRank(id int) int { return max((id-8)/2, 0) }

// Command is a control command (ps::Control::Command).
type Command int32

// Control commands of the dmlc generation.
const (
	CmdEmpty     Command = 0
	CmdTerminate Command = 1
	CmdAddNode   Command = 2
	CmdBarrier   Command = 3
	CmdAck       Command = 4
	CmdHeartbeat Command = 5
	// CmdInstanceBarrier is the BytePS fork's barrier over every instance
	// (its Start and Finalize use it); on the dmlc wire only elasticps nodes
	// of a job with instance groups (DMLC_GROUP_SIZE) send it.
	CmdInstanceBarrier Command = 9
)

// isBarrier reports whether c is a BARRIER or an INSTANCE_BARRIER, the
// commands that carry a barrier group.
func (c Command) isBarrier() bool { return c == CmdBarrier || c == CmdInstanceBarrier }

var commandNames = [...]string{"EMPTY", "TERMINATE", "ADD_NODE", "BARRIER", "ACK", "HEARTBEAT"}

func (c Command) String() string {
	if c >= 0 && int(c) < len(commandNames) {
		return commandNames[c]
	}
	if c == CmdInstanceBarrier {
		return "INSTANCE_BARRIER"
	}
	return fmt.Sprintf("CMD(%d)", int32(c))
}

// DataType tags each data frame (ps::DataType).
type DataType int32

// Data types with ps-lite's numeric values. Note that C++ `char` maps to
// Other, not Char.
const (
	Char DataType = iota
	Int8
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float
	Double
	Other
)

var dataTypeNames = [...]string{"CHAR", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FLOAT", "DOUBLE", "OTHER"}

func (d DataType) String() string {
	if d >= 0 && int(d) < len(dataTypeNames) {
		return dataTypeNames[d]
	}
	return fmt.Sprintf("DTYPE(%d)", int32(d))
}

// Size is the element size in bytes, or 1 for Char/Other.
func (d DataType) Size() int {
	switch d {
	case Int16, Uint16:
		return 2
	case Int32, Uint32, Float:
		return 4
	case Int64, Uint64, Double:
		return 8
	}
	return 1
}

// Node describes one process endpoint (ps::Node).
type Node struct {
	Role       Role
	ID         int32 // Empty until the scheduler assigns it
	CustomerID int32
	Hostname   string
	Port       int32
	IsRecovery bool
	// Standby marks a server that joins a running elastic job to take
	// load (scale-out); it has no logical key range of its own (PBNode
	// field 14, an elasticps extension written only when set).
	Standby bool
	// WantRank is one more than the rank this node asks the scheduler for
	// (BytePS's StartPS(…, rank, …), DMLC_RANK); 0 asks for none. It is
	// PBNode field 15 (an elasticps extension, written only when set) and
	// the fork's aux_id on its raw wire (-1 there for none).
	WantRank int32
}

// WantedRank returns the rank n asks for, if any.
func (n Node) WantedRank() (int, bool) { return int(n.WantRank) - 1, n.WantRank > 0 }

// WantRankOf is the WantRank value of rank r (r < 0: none).
func WantRankOf(r int) int32 {
	if r < 0 {
		return 0
	}
	return int32(r + 1)
}

// NewNode returns a Node with ps-lite's constructor defaults.
func NewNode(role Role) Node { return Node{Role: role, ID: Empty, Port: Empty} }

func (n Node) String() string {
	id := "?"
	if n.ID != Empty {
		id = fmt.Sprint(n.ID)
	}
	s := fmt.Sprintf("%s[id=%s, %s:%s]", n.Role, id, n.Hostname, idString(n.Port))
	if n.IsRecovery {
		s += " recovery"
	}
	return s
}

// Control is the control part of a Meta (ps::Control).
type Control struct {
	Cmd          Command
	Nodes        []Node
	BarrierGroup int32
	MsgSig       uint64
}

// Empty reports whether this is not a control message.
func (c *Control) Empty() bool { return c.Cmd == CmdEmpty }

// Meta is a message header (ps::Meta). Sender and Recver are not serialised:
// the transport fills Sender from the peer identity and Recver with the local id.
type Meta struct {
	Head       int32
	AppID      int32
	CustomerID int32
	Timestamp  int32
	Sender     int32
	Recver     int32
	Request    bool
	Push       bool
	Pull       bool
	SimpleApp  bool
	Body       []byte
	DataType   []DataType
	Control    Control
	DataSize   int32
	Priority   int32

	// Extensions (protobuf field numbers >= 14; written only when non-zero so
	// that C++ ps-lite, which skips unknown fields, is unaffected).
	Ext Ext

	// Raw holds the BytePS fork's RawMeta fields that dmlc's Meta lacks. The
	// bytedance wire carries them all (see rawmeta.go); the dmlc wire carries
	// Key, Addr, ValLen and Option as extension fields 21-24 (see dmlc.go).
	Raw RawFields
}

// Ext holds elasticps's wire extensions.
type Ext struct {
	Epoch      uint64 // routing-table epoch the sender used (field 14)
	SendNanos  int64  // sender clock at send (field 15)
	RecvNanos  int64  // server clock at receipt, echoed in the response (field 16)
	HandleNano int64  // server handling time in ns, in responses (field 17)
	PushSeq    uint64 // per (worker, key) push sequence number (field 18)
	Iteration  int64  // worker iteration for sync control (field 19)
	// Redirect marks a response whose request was not applied because the
	// server no longer (or not yet) serves its keys; the worker re-routes
	// it with a routing table of at least Epoch (field 20).
	Redirect bool
}

// NewMeta returns a Meta with ps-lite's constructor defaults.
func NewMeta() Meta {
	return Meta{Head: Empty, AppID: Empty, CustomerID: Empty, Timestamp: Empty, Sender: Empty, Recver: Empty}
}

// Message is a Meta plus raw data frames (keys, vals, lens for KV traffic).
type Message struct {
	Meta Meta
	Data [][]byte

	// UnverifiedSender is set by a transport given the job's token
	// (van.Options.AuthKey) when the connection the message came on
	// announced Meta.Sender without the tag only a token holder can make:
	// the id is then just the peer's claim. Never on the wire.
	UnverifiedSender bool
}

// AddData appends one data frame with its type tag, as ps::Message::AddData.
func (m *Message) AddData(t DataType, b []byte) {
	m.Meta.DataType = append(m.Meta.DataType, t)
	m.Meta.DataSize += int32(len(b))
	m.Data = append(m.Data, b)
}

func (m *Meta) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s => %s", idString(m.Sender), idString(m.Recver))
	if m.Timestamp != Empty {
		fmt.Fprintf(&b, " ts=%d", m.Timestamp)
	}
	if !m.Control.Empty() {
		fmt.Fprintf(&b, " control={%s", m.Control.Cmd)
		for _, n := range m.Control.Nodes {
			fmt.Fprintf(&b, " %s", n)
		}
		if m.Control.Cmd == CmdBarrier {
			fmt.Fprintf(&b, " group=%d", m.Control.BarrierGroup)
		}
		if m.Control.Cmd == CmdAck {
			fmt.Fprintf(&b, " sig=%d", m.Control.MsgSig)
		}
		b.WriteString("}")
	} else {
		fmt.Fprintf(&b, " app=%s customer=%s request=%v push=%v pull=%v simple_app=%v head=%s",
			idString(m.AppID), idString(m.CustomerID), m.Request, m.Push, m.Pull, m.SimpleApp, idString(m.Head))
		if len(m.Body) > 0 {
			fmt.Fprintf(&b, " body=%q", m.Body)
		}
		if len(m.DataType) > 0 {
			fmt.Fprintf(&b, " dtype=%v", m.DataType)
		}
	}
	return b.String()
}

// String is the meta's String followed by the size in bytes of each data
// frame, as ps-lite's debug string gives them (data_size=), which is what
// PS_VERBOSE=2 logs.
func (m *Message) String() string {
	var b strings.Builder
	b.WriteString(m.Meta.String())
	for _, d := range m.Data {
		fmt.Fprintf(&b, " data_size=%d", len(d))
	}
	return b.String()
}

// idString renders an id, app id, customer id or head, "unassigned" for
// Empty (the INT_MAX of ps-lite's unset fields).
func idString(v int32) string {
	if v == Empty {
		return "unassigned"
	}
	return strconv.Itoa(int(v))
}
