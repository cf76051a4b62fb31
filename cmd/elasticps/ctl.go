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

const ctlUsage = `usage: elasticps ctl [--addr HOST:PORT] COMMAND [ARGS]

Talks to the control API of an elastic job's scheduler (PS_ELASTIC=1).
Commands:
  status                 routing table and recent moves
  move BEGIN END TO      move keys [BEGIN, END) to server node TO
  drain NODE             move all keys off server NODE, then let it leave
  add                    start a standby server (this executable) that joins the
                         running job; needs the job's DMLC_* variables

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
	client := &http.Client{Timeout: 5 * time.Minute}
	base := "http://" + *addr
	switch a[0] {
	case "status":
		resp, err := client.Get(base + "/status")
		if err != nil {
			return unreachable(*addr, err)
		}
		var st coord.Status
		if err := decode(resp, &st); err != nil {
			return err
		}
		printStatus(st)
		return nil
	case "move":
		for i, name := range []string{"BEGIN", "END", "TO"} {
			if _, err := strconv.ParseUint(a[1+i], 10, 64); err != nil {
				return fmt.Errorf("ctl move: %s %q is not a non-negative integer; move takes %s", name, a[1+i], ctlArgs["move"])
			}
		}
		return post(client, *addr, base+"/move?"+url.Values{"begin": {a[1]}, "end": {a[2]}, "to": {a[3]}}.Encode())
	case "add":
		return ctlAdd(client, *addr, base)
	default: // drain
		if _, err := strconv.Atoi(a[1]); err != nil {
			return fmt.Errorf("ctl drain: NODE must be a server node id (8, 10, ...), got %q", a[1])
		}
		return post(client, *addr, base+"/drain?"+url.Values{"node": {a[1]}}.Encode())
	}
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

func post(c *http.Client, addr, u string) error {
	resp, err := c.Post(u, "", nil)
	if err != nil {
		return unreachable(addr, err)
	}
	var out json.RawMessage // printed as the scheduler sent it (keys are 64-bit)
	if err := decode(resp, &out); err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

func decode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ctl: scheduler answered %s: %s", resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

func printStatus(st coord.Status) {
	fmt.Printf("routing epoch %d, servers %v, %d moves (%d failed)\n\n", st.Epoch, st.Servers, st.Moves, st.Failed)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "begin\tend\tserver\tmigrating from\tcut-over push")
	for _, iv := range st.Intervals {
		from, cut := "", ""
		if iv.Prev != 0 {
			from, cut = strconv.Itoa(int(iv.Prev)), strconv.FormatUint(iv.CutSeq, 10)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\n", iv.Begin, iv.End, iv.Node, from, cut)
	}
	tw.Flush()
	if len(st.LastMoves) > 0 {
		fmt.Println()
		tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "recent moves\tfrom\tto\tbytes\tms\terror")
		for _, m := range st.LastMoves {
			fmt.Fprintf(tw, "[%d, %d)\t%d\t%d\t%d\t%.1f\t%s\n", m.Begin, m.End, m.From, m.To, m.Bytes, m.Millis, m.Error)
		}
		tw.Flush()
	}
}

// ctlAdd starts `elasticps server` with PS_STANDBY=1 as a process of its
// own (it outlives ctl), then waits until the scheduler lists it.
func ctlAdd(c *http.Client, addr, base string) error {
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
	cmd := exec.Command(exe, "server")
	cmd.Env = append(os.Environ(), "DMLC_ROLE=server", "PS_ELASTIC=1", "PS_STANDBY=1")
	cmd.SysProcAttr = detached()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ctl add: cannot start a server: %w", err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		after, err := ctlServers(c, addr, base)
		if err == nil && len(after) > len(before) {
			fmt.Printf("standby server %d joined (pid %d); give it keys with 'elasticps ctl move'\n", after[len(after)-1], cmd.Process.Pid)
			return nil
		}
	}
	return fmt.Errorf("ctl add: the standby server (pid %d) did not join within 30s", cmd.Process.Pid)
}

func ctlServers(c *http.Client, addr, base string) ([]int32, error) {
	resp, err := c.Get(base + "/status")
	if err != nil {
		return nil, unreachable(addr, err)
	}
	var st coord.Status
	if err := decode(resp, &st); err != nil {
		return nil, err
	}
	return st.Servers, nil
}
