package message_test

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

// rawGoldenPath holds every distinct meta frame the BytePS fork (bytedance/
// ps-lite a848f53) sent in seven captured jobs; see testdata/README.md.
const rawGoldenPath = "testdata/bytedance_rawmeta_vectors.tsv"

type rawGoldenRow struct {
	row     int
	kind    string
	meta    []byte
	decoded string
	ignore  [][2]int // inclusive byte ranges that hold the sender's garbage
}

func loadRawGolden(tb testing.TB) []rawGoldenRow {
	tb.Helper()
	f, err := os.Open(rawGoldenPath)
	require.NoError(tb, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var col map[string]int
	var rows []rawGoldenRow
	for line := 1; sc.Scan(); line++ {
		fields := strings.Split(sc.Text(), "\t")
		if col == nil {
			col = make(map[string]int)
			for i, name := range fields {
				col[name] = i
			}
			for _, need := range []string{"row", "kind", "meta_hex", "decoded", "ignore", "meta_len"} {
				require.Contains(tb, col, need, "%s: header lacks column %q", rawGoldenPath, need)
			}
			continue
		}
		require.Len(tb, fields, len(col), "%s:%d: columns", rawGoldenPath, line)
		r := rawGoldenRow{kind: fields[col["kind"]], decoded: fields[col["decoded"]]}
		r.row, err = strconv.Atoi(fields[col["row"]])
		require.NoError(tb, err, "%s:%d: row", rawGoldenPath, line)
		r.meta, err = hex.DecodeString(fields[col["meta_hex"]])
		require.NoError(tb, err, "%s:%d: meta_hex", rawGoldenPath, line)
		n, err := strconv.Atoi(fields[col["meta_len"]])
		require.NoError(tb, err, "%s:%d: meta_len", rawGoldenPath, line)
		require.Len(tb, r.meta, n, "%s:%d: meta_len", rawGoldenPath, line)
		r.ignore, err = parseIgnore(fields[col["ignore"]])
		require.NoError(tb, err, "%s:%d: ignore", rawGoldenPath, line)
		rows = append(rows, r)
	}
	require.NoError(tb, sc.Err())
	require.NotEmpty(tb, rows, "%s has no rows", rawGoldenPath)
	return rows
}

// parseIgnore reads "80-87:key(why);96-99:val_len(why)" or "-".
func parseIgnore(s string) ([][2]int, error) {
	if s == "-" {
		return nil, nil
	}
	var out [][2]int
	for _, part := range strings.Split(s, ";") {
		span, _, ok := strings.Cut(part, ":")
		lo, hi, ok2 := strings.Cut(span, "-")
		if !ok || !ok2 {
			return nil, fmt.Errorf("bad range %q", part)
		}
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b, err := strconv.Atoi(hi)
		if err != nil || b < a {
			return nil, fmt.Errorf("bad range %q", part)
		}
		out = append(out, [2]int{a, b})
	}
	return out, nil
}

// checkRawBytes checks our encoding against the fork's bytes: equal outside
// the ignore ranges; inside each range either equal (a field we carry, such
// as the uninitialised key) or all zeros (what we do not carry and the
// README says an encoder should zero).
func checkRawBytes(t *testing.T, r rawGoldenRow, got []byte, what string) {
	t.Helper()
	if !assert.Len(t, got, len(r.meta), "row %d (%s): %s: length", r.row, r.kind, what) {
		return
	}
	ignored := make([]bool, len(got))
	for _, span := range r.ignore {
		if !assert.Less(t, span[1], len(got), "row %d: ignore range %v", r.row, span) {
			return
		}
		seg, ref := got[span[0]:span[1]+1], r.meta[span[0]:span[1]+1]
		zero := strings.Count(string(seg), "\x00") == len(seg)
		assert.True(t, zero || string(seg) == string(ref), "row %d (%s): %s: ignored bytes %d-%d are %x, neither the fork's %x nor zeros",
			r.row, r.kind, what, span[0], span[1], seg, ref)
		for i := span[0]; i <= span[1]; i++ {
			ignored[i] = true
		}
	}
	for i := range got {
		if !ignored[i] && got[i] != r.meta[i] {
			assert.Fail(t, "byte mismatch", "row %d (%s): %s: byte %d is %#02x, the fork sent %#02x", r.row, r.kind, what, i, got[i], r.meta[i])
			return
		}
	}
}

func TestBytedanceGolden(t *testing.T) {
	rows := loadRawGolden(t)
	require.Len(t, rows, 363, "the file's row count (testdata/README.md): a truncated copy must not pass")
	var got message.Meta // reused across rows, as a transport would
	kinds := map[string]int{}
	for _, r := range rows {
		kinds[r.kind]++
		want, err := parseRawDecoded(r.decoded)
		if !assert.NoError(t, err, "row %d: parsing decoded column", r.row) {
			continue
		}
		// fork -> us: the frame decodes to the fields the capture lists.
		if !assert.NoError(t, message.DecodeRawMeta(r.meta, &got), "row %d (%s): DecodeRawMeta", r.row, r.kind) {
			continue
		}
		assert.True(t, metaEqual(&got, &want), "row %d (%s): decoded\n got %s\nwant %s", r.row, r.kind, dump(&got), dump(&want))
		// us -> fork: encoding those fields gives the fork's bytes.
		enc, err := message.EncodeRawMeta(&want)
		require.NoError(t, err, "row %d", r.row)
		checkRawBytes(t, r, enc, "encoding the decoded column")
		enc, err = message.EncodeRawMeta(&got)
		require.NoError(t, err, "row %d", r.row)
		checkRawBytes(t, r, enc, "re-encoding the decoded frame")
		assert.Equal(t, len(r.meta), want.RawEncodedLen(), "row %d (%s): RawEncodedLen", r.row, r.kind)
		// Through the Wire selector, as the van uses it.
		require.NoError(t, message.WireBytedance.Decode(r.meta, &got), "row %d: Wire.Decode", r.row)
		assert.True(t, metaEqual(&got, &want), "row %d: Wire.Decode", r.row)
	}
	t.Logf("checked %d golden rows: %v", len(rows), kinds)
}

// parseRawDecoded turns a bytedance decoded column (README §3) into the
// Meta DecodeRawMeta should return: kEmpty (32767) becomes Empty in control
// messages and in node ids, pull is the fork's meaning (a data message that
// is not a push), and the node fields we do not carry are checked to hold
// what the encoder writes (one port, aux_id -1) instead.
func parseRawDecoded(s string) (message.Meta, error) {
	get, err := parseTop(s, "head", "body_size", "control", "request", "app_id", "timestamp", "data_type_size",
		"src_dev_type", "src_dev_id", "dst_dev_type", "dst_dev_id", "customer_id", "push", "simple_app", "data_size",
		"key", "addr", "val_len", "option", "sid", "body", "data_type", "nodes")
	if err != nil {
		return message.Meta{}, err
	}
	var errs []error
	i32 := func(name string) int32 {
		v, e := get(name).int32(0)
		if e != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, e))
		}
		return v
	}
	boolean := func(name string) bool {
		v, e := get(name).bool()
		if e != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, e))
		}
		return v
	}
	u64 := func(name string, base int) uint64 {
		s := get(name).scalar
		if base == 16 {
			s = strings.TrimPrefix(s, "0x")
		}
		v, e := strconv.ParseUint(s, base, 64)
		if e != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, e))
		}
		return v
	}
	m := message.Meta{Sender: message.Empty, Recver: message.Empty}
	m.Head, m.AppID, m.Timestamp, m.CustomerID = i32("head"), i32("app_id"), i32("timestamp"), i32("customer_id")
	m.Request, m.Push, m.SimpleApp = boolean("request"), boolean("push"), boolean("simple_app")
	m.DataSize = i32("data_size")
	m.Raw = message.RawFields{
		SrcDevType: i32("src_dev_type"), SrcDevID: i32("src_dev_id"),
		DstDevType: i32("dst_dev_type"), DstDevID: i32("dst_dev_id"),
		Key: u64("key", 10), Addr: u64("addr", 16),
		ValLen: i32("val_len"), Option: i32("option"), SID: i32("sid"),
	}
	if b := get("body"); !b.absent {
		m.Body = b.bytes
	}
	if n := int(i32("body_size")); n != len(m.Body) {
		errs = append(errs, fmt.Errorf("body_size %d but body has %d bytes", n, len(m.Body)))
	}
	for _, v := range get("data_type").list {
		n, e := v.int32(0)
		if e != nil {
			errs = append(errs, e)
		}
		m.DataType = append(m.DataType, message.DataType(n))
	}
	if n := int(i32("data_type_size")); n != len(m.DataType) {
		errs = append(errs, fmt.Errorf("data_type_size %d but %d data types", n, len(m.DataType)))
	}
	ctl, err := fields(get("control").obj, "cmd", "node_size", "barrier_group", "msg_sig")
	if err != nil {
		return m, fmt.Errorf("control: %w", err)
	}
	cmd, _ := ctl("cmd").int32(0)
	bg, _ := ctl("barrier_group").int32(0)
	sig, err := strconv.ParseUint(ctl("msg_sig").scalar, 10, 64)
	if err != nil {
		return m, fmt.Errorf("msg_sig: %w", err)
	}
	m.Control = message.Control{Cmd: message.Command(cmd), BarrierGroup: bg, MsgSig: sig}
	for i, nv := range get("nodes").list {
		n, err := parseRawNode(nv)
		if err != nil {
			return m, fmt.Errorf("nodes[%d]: %w", i, err)
		}
		m.Control.Nodes = append(m.Control.Nodes, n)
	}
	if ns, _ := ctl("node_size").int32(0); int(ns) != len(m.Control.Nodes) {
		errs = append(errs, fmt.Errorf("node_size %d but %d nodes", ns, len(m.Control.Nodes)))
	}
	if m.Control.Cmd != message.CmdEmpty {
		for _, v := range []*int32{&m.Head, &m.AppID, &m.Timestamp, &m.CustomerID} {
			if *v == 32767 {
				*v = message.Empty
			}
		}
	}
	m.Pull = m.Control.Cmd == message.CmdEmpty && !m.SimpleApp && !m.Push
	if len(errs) > 0 {
		return m, errs[0]
	}
	return m, nil
}

func parseRawNode(v dval) (message.Node, error) {
	var n message.Node
	if !v.isObj {
		return n, fmt.Errorf("not an object")
	}
	get, err := fields(v.obj, "role", "id", "hostname", "num_ports", "ports", "port", "dev_types", "dev_ids",
		"is_recovery", "customer_id", "endpoint_name", "endpoint_name_len", "aux_id")
	if err != nil {
		return n, err
	}
	role, e1 := get("role").int32(0)
	id, e2 := get("id").int32(0)
	port, e3 := get("port").int32(0)
	rec, e4 := get("is_recovery").bool()
	cust, e5 := get("customer_id").int32(0)
	nports, e6 := get("num_ports").int32(0)
	aux, e7 := get("aux_id").int32(0)
	for _, e := range []error{e1, e2, e3, e4, e5, e6, e7} {
		if e != nil {
			return n, e
		}
	}
	// What the encoder writes for the fields a Node does not hold.
	if nports != 1 || aux != -1 || get("ports").list[0].scalar != strconv.Itoa(int(port)) {
		return n, fmt.Errorf("num_ports=%d ports[0]=%s aux_id=%d: the encoder writes 1, port, -1", nports, get("ports").list[0].scalar, aux)
	}
	if id == 32767 {
		id = message.Empty
	}
	h := get("hostname")
	if !h.isStr {
		return n, fmt.Errorf("hostname: not a string")
	}
	return message.Node{Role: message.Role(role), ID: id, Hostname: string(h.bytes), Port: port, IsRecovery: rec, CustomerID: cust}, nil
}
