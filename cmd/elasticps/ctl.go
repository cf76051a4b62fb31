package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/internal/cli"
)

const ctlUsage = `usage: elasticps ctl [--addr HOST:PORT] [--json] COMMAND [ARGS]

Talks to the control API of an elastic job's scheduler (PS_ELASTIC=1).
Commands:
  status                 servers (rank, node id, address, blocks and bytes held,
                         load, handling time, health), routing table, moves,
                         the balancer's last plan
  move BEGIN END TO      move keys [BEGIN, END) to server node TO
  drain NODE             move all keys off server NODE, then let it leave
  add                    start a standby server (this executable) that joins the
                         running job; needs the job's DMLC_* variables; it logs
                         to --log FILE (default: a new file in the temporary
                         directory, printed)

--json prints the scheduler's answer as JSON instead (snake_case keys, listed
in docs/elastic.md, "elasticps ctl --json").

The address is --addr, else PS_CTL_ADDR, else DMLC_PS_ROOT_URI and
DMLC_PS_ROOT_PORT+1 (where the scheduler serves it unless PS_CTL_ADDR is set
on it). 'elasticps local' prints it; a scheduler logs it at start. Flags may
come before or after the command.

flags:
`

// ctlArgs is what each ctl command takes, for its usage error.
var ctlArgs = map[string]string{
	"status": "", "add": "",
	"move":  "BEGIN END TO: the keys [BEGIN, END) and the server node id TO, e.g. move 0 1000 10",
	"drain": "NODE: the server node id, e.g. drain 10",
}

// runCtl talks to an elastic scheduler's control API.
func runCtl(args []string) error {
	fs := flag.NewFlagSet("elasticps ctl", flag.ContinueOnError)
	addr := fs.String("addr", "", "the scheduler's control API, HOST:PORT")
	asJSON := fs.Bool("json", false, "print the answer as JSON (snake_case keys)")
	logPath := fs.String("log", "", "add: the file the standby server logs to")
	var a []string
	// flags anywhere: parse, take one positional argument, parse the rest
	for {
		if err := cli.Parse(fs, ctlUsage, args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		a, args = append(a, fs.Arg(0)), fs.Args()[1:]
	}
	if len(a) == 0 {
		return errors.New("ctl: no command: use status, move BEGIN END TO, drain NODE or add (see elasticps ctl --help)")
	}
	want, ok := ctlArgs[a[0]]
	if !ok {
		return fmt.Errorf("ctl: unknown command %q: use status, move BEGIN END TO, drain NODE or add (see elasticps ctl --help)", a[0])
	}
	if n := len(strings.Fields(strings.Split(want, ":")[0])); len(a)-1 != n {
		if n == 0 {
			return fmt.Errorf("ctl %s takes no arguments, got %q", a[0], a[1:])
		}
		return fmt.Errorf("ctl %s takes %s; got %q", a[0], want, a[1:])
	}
	if *addr == "" {
		var err error
		if *addr, err = defaultCtlAddr(); err != nil {
			return err
		}
	}
	if _, port, err := net.SplitHostPort(*addr); err != nil || port == "" {
		return fmt.Errorf("ctl: the control API address %q is not HOST:PORT, e.g. 127.0.0.1:9092 (elasticps local prints it: \"control API at ...\")", *addr)
	}
	client := &http.Client{Timeout: 5 * time.Minute}
	base := "http://" + *addr
	var out any
	var err error
	switch a[0] {
	case "status":
		var st coord.Status
		if err = get(client, *addr, base+"/status", &st); err == nil && !*asJSON {
			printStatus(os.Stdout, st)
			return nil
		}
		out = st
	case "move":
		for i, name := range []string{"BEGIN", "END", "TO"} {
			if _, err := strconv.ParseUint(a[1+i], 10, 64); err != nil {
				return fmt.Errorf("ctl move: %s %q is not a non-negative integer; move takes %s", name, a[1+i], ctlArgs["move"])
			}
		}
		var ms coord.MoveStatus
		if err = post(client, *addr, base+"/move?"+url.Values{"begin": {a[1]}, "end": {a[2]}, "to": {a[3]}}.Encode(), &ms); err == nil && !*asJSON {
			printMoves(os.Stdout, "move", []coord.MoveStatus{ms})
			return nil
		}
		out = ms
	case "add":
		return ctlAdd(client, *addr, base, *logPath)
	default: // drain
		if _, err := strconv.Atoi(a[1]); err != nil {
			return fmt.Errorf("ctl drain: NODE must be a server node id (8, 10, ...), got %q", a[1])
		}
		var ds coord.DrainStatus
		if err = post(client, *addr, base+"/drain?"+url.Values{"node": {a[1]}}.Encode(), &ds); err == nil && !*asJSON {
			printMoves(os.Stdout, "move", ds.Moves)
			fmt.Printf("server %d drained (%d moves) and left the job\n", ds.Node, len(ds.Moves))
			return nil
		}
		out = ds
	}
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// defaultCtlAddr is the control address the environment gives.
func defaultCtlAddr() (string, error) {
	if v := os.Getenv("PS_CTL_ADDR"); v != "" {
		return v, nil
	}
	port, err := strconv.Atoi(os.Getenv("DMLC_PS_ROOT_PORT"))
	if err != nil || port < 1 || port >= 65535 {
		return "", errors.New("ctl: which scheduler? give its control API address with --addr HOST:PORT " +
			"(elasticps local prints it: \"control API at ...\"; a scheduler logs it at start), " +
			"or set PS_CTL_ADDR, or the job's DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT (the API is at DMLC_PS_ROOT_PORT+1)")
	}
	host := os.Getenv("DMLC_PS_ROOT_URI")
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(port+1)), nil
}

// unreachable words a failed request to the control API at addr.
func unreachable(addr string, err error) error {
	why := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		why = ue.Err.Error() // not the URL again
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		why = "nothing listens there"
	}
	return fmt.Errorf("ctl: cannot reach the scheduler's control API at %s: %s; is the job running, with PS_ELASTIC=1, and is this its address (--addr)?", addr, why)
}

func get(c *http.Client, addr, u string, v any) error {
	resp, err := c.Get(u)
	if err != nil {
		return unreachable(addr, err)
	}
	return decode(resp, v)
}

func post(c *http.Client, addr, u string, v any) error {
	resp, err := c.Post(u, "", nil)
	if err != nil {
		return unreachable(addr, err)
	}
	return decode(resp, v)
}

func decode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ctl: scheduler answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("ctl: the scheduler's answer is not what this ctl reads (%v); are ctl and the scheduler the same version?", err)
	}
	return nil
}

// printStatus writes st as tables: the job, its servers, the routing
// table and the recent moves.
func printStatus(w io.Writer, st coord.Status) {
	ids := make([]int32, len(st.Servers))
	for i, s := range st.Servers {
		ids[i] = s.NodeID
	}
	fmt.Fprintf(w, "routing epoch %d, servers %v, %d moves (%d failed)\n", st.Epoch, ids, st.Moves, st.FailedMoves)
	if p := st.LastPlan; p != nil {
		what := fmt.Sprintf("%d moves, %d done", p.Moves, p.MovedOK)
		if p.Error != "" {
			what = "rejected: " + p.Error
		}
		fmt.Fprintf(w, "last plan at %.1fs: %s, %s (%s)\n", p.AtMs/1000, p.Kind, p.Reason, what)
	} else {
		fmt.Fprintln(w, "last plan: none yet")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "server\trank\taddress\thealth\tintervals\tblocks\tbytes\tbusy\treq/s\tbytes/s\thandling")
	for _, s := range st.Servers {
		name := strconv.Itoa(int(s.NodeID))
		if s.Standby {
			name += " (standby)"
		}
		addr := s.Address
		if addr == "" {
			addr = "-" // not registered yet
		}
		handling := "-"
		if s.HandlingUs > 0 {
			handling = fmt.Sprintf("%.0fus", s.HandlingUs)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\t%.0f%%\t%.0f\t%s\t%s\n", name, s.Rank, addr, s.Health,
			s.Intervals, s.Blocks, humanBytes(float64(s.Bytes)), 100*s.Busy, s.RequestsPerSec, humanBytes(s.BytesPerSec), handling)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "begin\tend\tserver\tmigrating from\tcut-over push")
	for _, iv := range st.Intervals {
		from, cut := "", ""
		if iv.MigratingFrom != 0 {
			from, cut = strconv.Itoa(int(iv.MigratingFrom)), strconv.FormatUint(iv.CutSeq, 10)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\n", iv.Begin, iv.End, iv.Server, from, cut)
	}
	tw.Flush()
	if len(st.LastMoves) > 0 {
		fmt.Fprintln(w)
		printMoves(w, "recent moves", st.LastMoves)
	}
}

// printMoves writes moves as a table whose first column is titled title;
// status, move and drain share it.
func printMoves(w io.Writer, title string, moves []coord.MoveStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tfrom\tto\tbytes\tms\terror\n", title)
	for _, m := range moves {
		fmt.Fprintf(tw, "[%d, %d)\t%d\t%d\t%d\t%.1f\t%s\n", m.Begin, m.End, m.From, m.To, m.Bytes, m.Ms, m.Error)
	}
	tw.Flush()
}

// humanBytes writes n bytes with a unit (B, KB, MB, GB; powers of 1000).
func humanBytes(n float64) string {
	for _, u := range []string{"B", "KB", "MB"} {
		if n < 1000 {
			if u == "B" {
				return fmt.Sprintf("%.0f %s", n, u)
			}
			return fmt.Sprintf("%.1f %s", n, u)
		}
		n /= 1000
	}
	return fmt.Sprintf("%.1f GB", n)
}

// ctlAdd starts `elasticps server` with PS_STANDBY=1 as a process of its
// own (it outlives ctl), logging to logPath (default: a new file in the
// temporary directory), then waits until the scheduler lists it.
func ctlAdd(c *http.Client, addr, base, logPath string) error {
	for _, k := range []string{"DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER"} {
		if os.Getenv(k) == "" {
			return fmt.Errorf("ctl add: %s is not set: a standby server needs the job's DMLC_* variables", k)
		}
	}
	before, err := ctlServers(c, addr, base)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var logf *os.File
	if logPath == "" {
		logf, err = os.CreateTemp("", "elasticps-standby-*.log")
	} else {
		logf, err = os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	if err != nil {
		return fmt.Errorf("ctl add: cannot open the standby server's log: %w (choose another with --log FILE)", err)
	}
	defer logf.Close() // the server has its own descriptor
	cmd := exec.Command(exe, "server")
	cmd.Env = append(os.Environ(), "DMLC_ROLE=server", "PS_ELASTIC=1", "PS_STANDBY=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = detached()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ctl add: cannot start a server: %w", err)
	}
	fmt.Printf("started a standby server (pid %d), logging to %s\n", cmd.Process.Pid, logf.Name())
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		after, err := ctlServers(c, addr, base)
		if err == nil && len(after) > len(before) {
			fmt.Printf("standby server %d joined (pid %d); give it keys with 'elasticps ctl move'\n", after[len(after)-1], cmd.Process.Pid)
			return nil
		}
	}
	return fmt.Errorf("ctl add: the standby server (pid %d) did not join within 30s; see its log %s", cmd.Process.Pid, logf.Name())
}

func ctlServers(c *http.Client, addr, base string) ([]int32, error) {
	var st coord.Status
	if err := get(c, addr, base+"/status", &st); err != nil {
		return nil, err
	}
	ids := make([]int32, len(st.Servers))
	for i, s := range st.Servers {
		ids[i] = s.NodeID
	}
	return ids, nil
}
