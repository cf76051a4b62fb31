package message_test

// Golden tests against meta frames captured from C++ ps-lite (dmlc master),
// kept in testdata/ (see testdata/README.md for the columns and the
// grammar of the `decoded` column parsed here).

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

var dmlcGoldenPath = filepath.Join("testdata", "dmlc_meta_vectors.tsv")

type goldenRow struct {
	row     int    // the TSV's own row number
	kind    string // e.g. "KV PUSH request <float>"
	meta    []byte // meta_hex decoded
	decoded string // the decoded column
}

// loadDmlcGolden reads the golden TSV; a missing or malformed file fails tb,
// so that the byte-exact tests can never pass by skipping.
func loadDmlcGolden(tb testing.TB) []goldenRow {
	tb.Helper()
	f, err := os.Open(dmlcGoldenPath)
	require.NoError(tb, err, "the golden vectors ship with the module")
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<22)
	var col map[string]int
	var rows []goldenRow
	for line := 1; sc.Scan(); line++ {
		fields := strings.Split(sc.Text(), "\t")
		if col == nil {
			col = make(map[string]int)
			for i, name := range fields {
				col[name] = i
			}
			for _, need := range []string{"row", "kind", "meta_hex", "decoded"} {
				require.Contains(tb, col, need, "%s: header lacks column %q", dmlcGoldenPath, need)
			}
			continue
		}
		require.Len(tb, fields, len(col), "%s:%d: columns", dmlcGoldenPath, line)
		n, err := strconv.Atoi(fields[col["row"]])
		require.NoError(tb, err, "%s:%d: row", dmlcGoldenPath, line)
		meta, err := hex.DecodeString(fields[col["meta_hex"]])
		require.NoError(tb, err, "%s:%d: meta_hex", dmlcGoldenPath, line)
		rows = append(rows, goldenRow{row: n, kind: fields[col["kind"]], meta: meta, decoded: fields[col["decoded"]]})
	}
	require.NoError(tb, sc.Err())
	require.NotEmpty(tb, rows, "%s has no rows", dmlcGoldenPath)
	return rows
}

func TestDmlcGolden(t *testing.T) {
	rows := loadDmlcGolden(t)
	// The file's own count (testdata/README.md): a truncated copy must not
	// pass.
	require.Len(t, rows, 1198)
	var got message.Meta // reused across rows, as a transport would
	for _, r := range rows {
		want, err := parseDecoded(r.decoded)
		if !assert.NoError(t, err, "row %d: parsing decoded column", r.row) {
			continue
		}
		if !assert.NoError(t, message.DecodeMeta(r.meta, &got), "row %d (%s): DecodeMeta", r.row, r.kind) {
			continue
		}
		assert.True(t, metaEqual(&got, &want), "row %d (%s): decoded\n got %s\nwant %s", r.row, r.kind, dump(&got), dump(&want))
		assert.Equal(t, r.meta, message.EncodeMeta(&got), "row %d (%s): re-encoding the decoded meta", r.row, r.kind)
		assert.Equal(t, r.meta, message.EncodeMeta(&want), "row %d (%s): encoding the decoded column", r.row, r.kind)
		assert.Equal(t, len(r.meta), want.EncodedLen(), "row %d (%s): EncodedLen", r.row, r.kind)
	}
	t.Logf("checked %d golden rows", len(rows))
}

// TestParseDecoded pins the parser on the README's grammar, so that a parser
// bug cannot make TestDmlcGolden vacuous.
func TestParseDecoded(t *testing.T) {
	m, err := parseDecoded(`head=2147483647 body=hex:00ff control={cmd=ADD_NODE(2) nodes=[{role=WORKER(1) id=- hostname="a b" port=- is_recovery=1 customer_id=3},{role=SERVER(0) id=8 hostname=- port=9 is_recovery=- customer_id=-}] barrier_group=- msg_sig=7} request=1 push=- pull=1 simple_app=0 app_id=- timestamp=-4 data_type=[UINT64(8),FLOAT(9)] customer_id=- data_size=- priority=5`)
	require.NoError(t, err)
	want := message.NewMeta()
	want.Body = []byte{0, 0xff}
	want.Control = message.Control{Cmd: message.CmdAddNode, MsgSig: 7, Nodes: []message.Node{
		{Role: message.RoleWorker, ID: message.Empty, Hostname: "a b", Port: message.Empty, IsRecovery: true, CustomerID: 3},
		{Role: message.RoleServer, ID: 8, Port: 9},
	}}
	want.Request, want.Pull = true, true
	want.Timestamp = -4
	want.DataType = []message.DataType{message.Uint64, message.Float}
	want.Priority = 5
	assert.True(t, metaEqual(&m, &want), "got %s\nwant %s", dump(&m), dump(&want))
	for _, bad := range []string{
		"",
		"head=1",
		`head=1 body=- control=- request=0 push=0 pull=0 simple_app=0 app_id=- timestamp=- data_type=[] customer_id=0 data_size=- priority=0 extra=1`,
		`body=- head=1 control=- request=0 push=0 pull=0 simple_app=0 app_id=- timestamp=- data_type=[] customer_id=0 data_size=- priority=0`,
		`head=x body=- control=- request=0 push=0 pull=0 simple_app=0 app_id=- timestamp=- data_type=[] customer_id=0 data_size=- priority=0`,
		`head=1 body="x control=- request=0 push=0 pull=0 simple_app=0 app_id=- timestamp=- data_type=[] customer_id=0 data_size=- priority=0`,
	} {
		_, err := parseDecoded(bad)
		assert.Error(t, err, "parseDecoded(%q)", bad)
	}
}

// ---------------------------------------------------------------------------
// A parser for the `decoded` column (README §3, dmlc).

// dval is one parsed value of the decoded grammar.
type dval struct {
	absent bool
	scalar string // integer or NAME(n) token
	bytes  []byte // "..." or hex:...
	isStr  bool
	list   []dval
	obj    []dpair // {...}, in order
	isObj  bool
	isList bool
}

type dpair struct {
	name string
	val  dval
}

type dparser struct {
	s string
	i int
}

func (p *dparser) errorf(format string, args ...any) error {
	return fmt.Errorf("at column %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *dparser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// pairs parses `name=value` pairs separated by single spaces, up to end.
func (p *dparser) pairs(end byte) ([]dpair, error) {
	var out []dpair
	for {
		j := strings.IndexByte(p.s[p.i:], '=')
		if j <= 0 {
			return nil, p.errorf("want name=value")
		}
		name := p.s[p.i : p.i+j]
		if strings.ContainsAny(name, " ,[]{}\"") {
			return nil, p.errorf("bad field name %q", name)
		}
		p.i += j + 1
		v, err := p.value()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, dpair{name, v})
		switch c := p.peek(); {
		case c == ' ':
			p.i++
		case c == end:
			return out, nil
		default:
			return nil, p.errorf("unexpected %q after %s", c, name)
		}
	}
}

func (p *dparser) value() (dval, error) {
	switch c := p.peek(); {
	case c == '"':
		j := strings.IndexByte(p.s[p.i+1:], '"')
		if j < 0 {
			return dval{}, p.errorf("unterminated string")
		}
		v := dval{bytes: []byte(p.s[p.i+1 : p.i+1+j]), isStr: true}
		p.i += j + 2
		return v, nil
	case c == '[':
		p.i++
		v := dval{isList: true}
		if p.peek() == ']' {
			p.i++
			return v, nil
		}
		for {
			e, err := p.value()
			if err != nil {
				return dval{}, err
			}
			v.list = append(v.list, e)
			switch p.peek() {
			case ',':
				p.i++
			case ']':
				p.i++
				return v, nil
			default:
				return dval{}, p.errorf("want , or ] in list")
			}
		}
	case c == '{':
		p.i++
		ps, err := p.pairs('}')
		if err != nil {
			return dval{}, err
		}
		p.i++ // '}'
		return dval{obj: ps, isObj: true}, nil
	}
	j := p.i
	for j < len(p.s) && !strings.ContainsRune(" ,]}", rune(p.s[j])) {
		j++
	}
	tok := p.s[p.i:j]
	p.i = j
	switch {
	case tok == "":
		return dval{}, p.errorf("empty value")
	case tok == "-":
		return dval{absent: true}, nil
	case strings.HasPrefix(tok, "hex:"):
		b, err := hex.DecodeString(tok[4:])
		if err != nil {
			return dval{}, err
		}
		return dval{bytes: b, isStr: true}, nil
	}
	return dval{scalar: tok}, nil
}

// fields checks that obj holds exactly names, in that order, and returns a
// lookup function.
func fields(obj []dpair, names ...string) (func(string) dval, error) {
	if len(obj) != len(names) {
		got := make([]string, len(obj))
		for i, p := range obj {
			got[i] = p.name
		}
		return nil, fmt.Errorf("fields %v, want %v", got, names)
	}
	m := make(map[string]dval, len(obj))
	for i, p := range obj {
		if p.name != names[i] {
			return nil, fmt.Errorf("field %d is %q, want %q", i, p.name, names[i])
		}
		m[p.name] = p.val
	}
	return func(s string) dval { return m[s] }, nil
}

// int parses an integer or NAME(n) token; absent yields def.
func (v dval) int(def int64, bitSize int) (int64, error) {
	if v.absent {
		return def, nil
	}
	s := v.scalar
	if i := strings.IndexByte(s, '('); i >= 0 && strings.HasSuffix(s, ")") {
		s = s[i+1 : len(s)-1]
	}
	if s == "" {
		return 0, fmt.Errorf("want an integer, got %+v", v)
	}
	return strconv.ParseInt(s, 10, bitSize)
}

func (v dval) int32(def int32) (int32, error) {
	n, err := v.int(int64(def), 32)
	return int32(n), err
}

func (v dval) bool() (bool, error) {
	n, err := v.int(0, 64)
	if err != nil || n > 1 || n < 0 {
		return false, fmt.Errorf("bad bool %+v (%v)", v, err)
	}
	return n == 1, nil
}

// parseTop parses a whole decoded column whose top-level fields must be
// names, in that order.
func parseTop(s string, names ...string) (func(string) dval, error) {
	p := &dparser{s: s}
	top, err := p.pairs(0)
	if err != nil {
		return nil, err
	}
	if p.i != len(s) {
		return nil, p.errorf("trailing text")
	}
	return fields(top, names...)
}

// parseDecoded turns a decoded column into the Meta DecodeMeta should return
// for the frame, applying ps-lite's defaults for absent ('-') fields.
func parseDecoded(s string) (message.Meta, error) {
	get, err := parseTop(s, "head", "body", "control", "request", "push", "pull", "simple_app",
		"app_id", "timestamp", "data_type", "customer_id", "data_size", "priority")
	if err != nil {
		return message.Meta{}, err
	}
	m := message.NewMeta()
	var errs []error
	check := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	var e error
	m.Head, e = get("head").int32(message.Empty)
	check("head", e)
	if b := get("body"); !b.absent {
		if !b.isStr {
			check("body", fmt.Errorf("not a string: %+v", b))
		}
		m.Body = b.bytes
	}
	if c := get("control"); !c.absent {
		m.Control, e = parseControl(c)
		check("control", e)
	}
	m.Request, e = get("request").bool()
	check("request", e)
	m.Push, e = get("push").bool()
	check("push", e)
	m.Pull, e = get("pull").bool()
	check("pull", e)
	m.SimpleApp, e = get("simple_app").bool()
	check("simple_app", e)
	m.AppID, e = get("app_id").int32(message.Empty)
	check("app_id", e)
	m.Timestamp, e = get("timestamp").int32(message.Empty)
	check("timestamp", e)
	dt := get("data_type")
	if !dt.isList {
		check("data_type", fmt.Errorf("not a list: %+v", dt))
	}
	for _, v := range dt.list {
		n, e := v.int32(0)
		check("data_type", e)
		m.DataType = append(m.DataType, message.DataType(n))
	}
	m.CustomerID, e = get("customer_id").int32(message.Empty)
	check("customer_id", e)
	if ds := get("data_size"); !ds.absent {
		// The codec never writes data_size and does not store it on decode.
		check("data_size", fmt.Errorf("present (%s); the ZMQ van never writes it", ds.scalar))
	}
	m.Priority, e = get("priority").int32(0)
	check("priority", e)
	if len(errs) > 0 {
		return m, errs[0]
	}
	return m, nil
}

func parseControl(v dval) (message.Control, error) {
	var c message.Control
	if !v.isObj {
		return c, fmt.Errorf("not an object: %+v", v)
	}
	get, err := fields(v.obj, "cmd", "nodes", "barrier_group", "msg_sig")
	if err != nil {
		return c, err
	}
	if get("cmd").absent {
		return c, fmt.Errorf("cmd absent")
	}
	cmd, err := get("cmd").int32(0)
	if err != nil {
		return c, err
	}
	c.Cmd = message.Command(cmd)
	if c.BarrierGroup, err = get("barrier_group").int32(0); err != nil {
		return c, err
	}
	sig := get("msg_sig")
	if !sig.absent {
		if c.MsgSig, err = strconv.ParseUint(sig.scalar, 10, 64); err != nil {
			return c, err
		}
	}
	nodes := get("nodes")
	if !nodes.isList {
		return c, fmt.Errorf("nodes: not a list")
	}
	for i, nv := range nodes.list {
		n, err := parseNode(nv)
		if err != nil {
			return c, fmt.Errorf("nodes[%d]: %w", i, err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c, nil
}

func parseNode(v dval) (message.Node, error) {
	n := message.Node{ID: message.Empty, Port: message.Empty}
	if !v.isObj {
		return n, fmt.Errorf("not an object")
	}
	get, err := fields(v.obj, "role", "id", "hostname", "port", "is_recovery", "customer_id")
	if err != nil {
		return n, err
	}
	if get("role").absent {
		return n, fmt.Errorf("role absent")
	}
	role, err := get("role").int32(0)
	if err != nil {
		return n, err
	}
	n.Role = message.Role(role)
	if n.ID, err = get("id").int32(message.Empty); err != nil {
		return n, err
	}
	if h := get("hostname"); !h.absent {
		if !h.isStr {
			return n, fmt.Errorf("hostname: not a string")
		}
		n.Hostname = string(h.bytes)
	}
	if n.Port, err = get("port").int32(message.Empty); err != nil {
		return n, err
	}
	if n.IsRecovery, err = get("is_recovery").bool(); err != nil {
		return n, err
	}
	if n.CustomerID, err = get("customer_id").int32(0); err != nil {
		return n, err
	}
	return n, nil
}

// ---------------------------------------------------------------------------
// Helpers shared by the tests in this package.

// metaEqual compares two Metas field by field, treating nil and empty slices
// alike (DecodeMeta reuses capacity, so it returns empty non-nil slices).
func metaEqual(a, b *message.Meta) bool {
	return a.Head == b.Head && a.AppID == b.AppID && a.CustomerID == b.CustomerID &&
		a.Timestamp == b.Timestamp && a.Sender == b.Sender && a.Recver == b.Recver &&
		a.Request == b.Request && a.Push == b.Push && a.Pull == b.Pull && a.SimpleApp == b.SimpleApp &&
		bytes.Equal(a.Body, b.Body) && slices.Equal(a.DataType, b.DataType) &&
		a.Control.Cmd == b.Control.Cmd && slices.Equal(a.Control.Nodes, b.Control.Nodes) &&
		a.Control.BarrierGroup == b.Control.BarrierGroup && a.Control.MsgSig == b.Control.MsgSig &&
		a.DataSize == b.DataSize && a.Priority == b.Priority && a.Ext == b.Ext && a.Raw == b.Raw
}

// dump prints every field, unlike Meta.String which is a summary.
func dump(m *message.Meta) string {
	return fmt.Sprintf("{Head:%d AppID:%d CustomerID:%d Timestamp:%d Sender:%d Recver:%d Request:%v Push:%v Pull:%v SimpleApp:%v Body:%q DataType:%v Control:{Cmd:%v Nodes:%+v BarrierGroup:%d MsgSig:%d} DataSize:%d Priority:%d Ext:%+v Raw:%+v}",
		m.Head, m.AppID, m.CustomerID, m.Timestamp, m.Sender, m.Recver, m.Request, m.Push, m.Pull, m.SimpleApp,
		m.Body, m.DataType, m.Control.Cmd, m.Control.Nodes, m.Control.BarrierGroup, m.Control.MsgSig,
		m.DataSize, m.Priority, m.Ext, m.Raw)
}
