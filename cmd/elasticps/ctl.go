package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/elasticps/elasticps/elastic/coord"
)

const ctlUsage = `usage: elasticps ctl [--addr HOST:PORT] COMMAND
  status                 routing table and recent moves
  move BEGIN END TO      move keys [BEGIN, END) to server node TO
  drain NODE             move all keys off server NODE, then let it leave
  add                    start a standby server (this executable) that joins the
                         running job; needs the job's DMLC_* variables
The scheduler serves the control API when PS_ELASTIC=1, at PS_CTL_ADDR
(default: the scheduler's host, DMLC_PS_ROOT_PORT+1).`

// runCtl talks to an elastic scheduler's control API.
func runCtl(args []string) error {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	addr := fs.String("addr", defaultCtlAddr(), "scheduler control address")
	fs.Usage = func() { fmt.Fprintln(os.Stderr, ctlUsage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	a := fs.Args()
	if len(a) == 0 {
		fs.Usage()
		return fmt.Errorf("ctl: missing command")
	}
	client := &http.Client{Timeout: 5 * time.Minute}
	base := "http://" + *addr
	switch {
	case a[0] == "status" && len(a) == 1:
		resp, err := client.Get(base + "/status")
		if err != nil {
			return fmt.Errorf("ctl: cannot reach the scheduler at %s (is PS_ELASTIC=1 set on it?): %w", *addr, err)
		}
		var st coord.Status
		if err := decode(resp, &st); err != nil {
			return err
		}
		printStatus(st)
		return nil
	case a[0] == "move" && len(a) == 4:
		return post(client, base+"/move?"+url.Values{"begin": {a[1]}, "end": {a[2]}, "to": {a[3]}}.Encode())
	case a[0] == "add" && len(a) == 1:
		return ctlAdd(client, base)
	case a[0] == "drain" && len(a) == 2:
		if _, err := strconv.Atoi(a[1]); err != nil {
			return fmt.Errorf("ctl: drain needs a server node id (8, 10, ...), got %q", a[1])
		}
		return post(client, base+"/drain?"+url.Values{"node": {a[1]}}.Encode())
	}
	fs.Usage()
	return fmt.Errorf("ctl: bad command %q", a)
}

func defaultCtlAddr() string {
	if v := os.Getenv("PS_CTL_ADDR"); v != "" {
		return v
	}
	host := os.Getenv("DMLC_PS_ROOT_URI")
	if host == "" {
		host = "127.0.0.1"
	}
	port, _ := strconv.Atoi(os.Getenv("DMLC_PS_ROOT_PORT"))
	return fmt.Sprintf("%s:%d", host, port+1)
}

func post(c *http.Client, u string) error {
	resp, err := c.Post(u, "", nil)
	if err != nil {
		return fmt.Errorf("ctl: cannot reach the scheduler: %w", err)
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
func ctlAdd(c *http.Client, base string) error {
	for _, k := range []string{"DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER"} {
		if os.Getenv(k) == "" {
			return fmt.Errorf("ctl add: %s is not set: a standby server needs the job's DMLC_* variables", k)
		}
	}
	before, err := ctlServers(c, base)
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
		after, err := ctlServers(c, base)
		if err == nil && len(after) > len(before) {
			fmt.Printf("standby server %d joined (pid %d); give it keys with 'elasticps ctl move'\n", after[len(after)-1], cmd.Process.Pid)
			return nil
		}
	}
	return fmt.Errorf("ctl add: the standby server (pid %d) did not join within 30s", cmd.Process.Pid)
}

func ctlServers(c *http.Client, base string) ([]int32, error) {
	resp, err := c.Get(base + "/status")
	if err != nil {
		return nil, fmt.Errorf("ctl: cannot reach the scheduler: %w", err)
	}
	var st coord.Status
	if err := decode(resp, &st); err != nil {
		return nil, err
	}
	return st.Servers, nil
}
