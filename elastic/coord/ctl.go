package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/elasticps/elasticps/message"
)

// The control API's JSON (GET /status, POST /move, POST /drain) has
// snake_case keys that stay stable; docs/elastic.md lists them. Durations
// are in milliseconds (suffix _ms) or microseconds (_us).

// Status is what `elasticps ctl status` shows.
type Status struct {
	Epoch       uint64           `json:"epoch"`
	Servers     []ServerStatus   `json:"servers"`
	Intervals   []IntervalStatus `json:"intervals"`
	Moves       int              `json:"moves"`        // carried out so far
	FailedMoves int              `json:"failed_moves"` // aborted or failed
	LastMoves   []MoveStatus     `json:"last_moves"`   // the latest 20, oldest first
	// LastPlan is the balancer's latest plan that decided something (nil:
	// none yet, or no balancer).
	LastPlan *PlanStatus `json:"last_plan"`
}

// ServerStatus is one server of Status. The load fields come from the
// server's latest load report (zero before its first).
type ServerStatus struct {
	Rank      int    `json:"rank"`
	NodeID    int32  `json:"node_id"`
	Address   string `json:"address"`
	Standby   bool   `json:"standby"`   // joined the running job (ctl add)
	Intervals int    `json:"intervals"` // routing intervals it owns
	// Blocks are the key blocks (keys requested together) that servers
	// have reported serving and that the routing table gives this one,
	// and Bytes their largest payload per request summed: the size of
	// the values it holds, as far as requests show them.
	Blocks int   `json:"blocks"`
	Bytes  int64 `json:"bytes"`
	// Busy is the fraction of the report's interval spent handling
	// requests (above 1 with concurrent handlers).
	Busy           float64 `json:"busy"`
	RequestsPerSec float64 `json:"requests_per_sec"`
	BytesPerSec    float64 `json:"bytes_per_sec"`
	HandlingUs     float64 `json:"handling_us"`   // mean handling time of a request
	ReportAgeMs    float64 `json:"report_age_ms"` // since its latest report (-1: none yet)
	// Health is "ok"; "no reports" (none yet); "silent" (no report for
	// three report intervals); "lagging" (has not acknowledged the
	// routing table); "dead"; or "left".
	Health string `json:"health"`
}

// IntervalStatus is one row of the routing table: keys [begin, end) on
// server, and during a move the server they come from and the push
// number at which they change hands.
type IntervalStatus struct {
	Begin         uint64  `json:"begin"`
	End           uint64  `json:"end"`
	Server        int32   `json:"server"`
	MigratingFrom int32   `json:"migrating_from,omitempty"`
	CutSeq        uint64  `json:"cut_seq,omitempty"`
	Backups       []int32 `json:"backups,omitempty"`
}

// MoveStatus is one move, in Status and in the answers to move and drain.
type MoveStatus struct {
	Begin uint64  `json:"begin"`
	End   uint64  `json:"end"`
	From  int32   `json:"from"`
	To    int32   `json:"to"`
	Bytes int     `json:"bytes"` // state carried over
	Ms    float64 `json:"ms"`    // the whole move
	Error string  `json:"error,omitempty"`
}

// DrainStatus is the answer to drain.
type DrainStatus struct {
	Node  int32        `json:"node"`
	Left  bool         `json:"left"`
	Moves []MoveStatus `json:"moves"`
}

// PlanStatus is a balancer plan.
type PlanStatus struct {
	AtMs    float64 `json:"at_ms"` // since the balancer started
	Kind    string  `json:"kind"`  // exploit, explore or revert
	Reason  string  `json:"reason"`
	Moves   int     `json:"moves"`
	MovedOK int     `json:"moved_ok"`
	Error   string  `json:"error,omitempty"` // the planner rejected its input
}

func moveStatus(res Result) MoveStatus {
	ms := MoveStatus{Begin: res.Move.Begin, End: res.Move.End, From: res.Move.From, To: res.Move.To,
		Bytes: res.Bytes, Ms: float64(res.Duration.Microseconds()) / 1000}
	if res.Err != nil {
		ms.Error = res.Err.Error()
	}
	return ms
}

// Status reports the servers, the routing table, the moves so far and the
// balancer's latest plan.
func (c *Coordinator) Status() Status {
	r := c.table.Current()
	st := Status{Epoch: r.Epoch, Intervals: []IntervalStatus{}, Servers: []ServerStatus{}, LastMoves: []MoveStatus{}}
	owned := map[int32]int{}
	for _, iv := range r.Intervals {
		st.Intervals = append(st.Intervals, IntervalStatus{Begin: iv.Begin, End: iv.End, Server: iv.Node,
			MigratingFrom: iv.Prev, CutSeq: iv.CutSeq, Backups: iv.Backups})
		owned[iv.Node]++
	}
	h := c.History()
	for i, res := range h {
		if res.Err != nil {
			st.FailedMoves++
		} else {
			st.Moves++
		}
		if i >= len(h)-20 {
			st.LastMoves = append(st.LastMoves, moveStatus(res))
		}
	}
	c.mu.Lock()
	bal := c.bal
	c.mu.Unlock()
	now := time.Now()
	lagging := c.Lagging()
	standbys := c.po.Standbys()
	var blocks map[int32]int
	var bytes map[int32]int64
	if bal != nil {
		blocks, bytes = bal.held(r)
	}
	ids := c.Servers()
	slices.Sort(ids)
	for _, id := range ids {
		s := ServerStatus{Rank: message.IDToRank(int(id)), NodeID: id, Intervals: owned[id],
			Blocks: blocks[id], Bytes: bytes[id], Standby: slices.Contains(standbys, id), ReportAgeMs: -1, Health: "ok"}
		ns, _ := c.po.NodeStatus(id)
		s.Address = ns.Addr
		seen := false
		if bal != nil {
			seen = bal.load(id, now, &s)
		}
		switch {
		case ns.Dead:
			s.Health = "dead"
		case ns.Left:
			s.Health = "left"
		case slices.Contains(lagging, id):
			s.Health = "lagging"
		case bal != nil && !seen:
			s.Health = "no reports"
		}
		st.Servers = append(st.Servers, s)
	}
	if bal != nil {
		st.LastPlan = bal.lastPlan()
	}
	return st
}

// notComplete answers 409 while the job is still forming: until every
// node has registered, no server is connected to the others, and a move
// would fail on a missing connection.
func (c *Coordinator) notComplete(w http.ResponseWriter) bool {
	select {
	case <-c.po.Ready():
		return false
	default:
	}
	http.Error(w, fmt.Sprintf("the job is not complete yet: the scheduler still waits for nodes to register (DMLC_NUM_SERVER=%d, DMLC_NUM_WORKER=%d; status lists the servers so far); move or drain keys once every node has joined",
		c.po.NumServers(), c.po.NumWorkers()), http.StatusConflict)
	return true
}

// ServeControl serves the control API on addr (for `elasticps ctl`):
// GET /status, POST /move?begin=&end=&to=, POST /drain?node=. It returns
// the bound address.
func (c *Coordinator) ServeControl(addr string) (string, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, c.Status()) })
	mux.HandleFunc("POST /move", func(w http.ResponseWriter, r *http.Request) {
		begin, end, to, err := parseMove(r.URL.RawQuery)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if c.notComplete(w) {
			return
		}
		res, err := c.Move(begin, end, to)
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		writeJSON(w, moveStatus(res))
	})
	mux.HandleFunc("POST /drain", func(w http.ResponseWriter, r *http.Request) {
		id, err := parseDrain(r.URL.RawQuery)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if c.notComplete(w) {
			return
		}
		res, err := c.Drain(id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		ds := DrainStatus{Node: id, Left: true, Moves: []MoveStatus{}}
		for _, m := range res {
			ds.Moves = append(ds.Moves, moveStatus(m))
		}
		writeJSON(w, ds)
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("coord: control API cannot listen on %s: %w (set PS_CTL_ADDR)", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-c.po.Done()
		_ = srv.Close()
	}()
	return l.Addr().String(), nil
}

// parseMove reads the query of POST /move.
func parseMove(query string) (begin, end uint64, to int32, err error) {
	q, _ := url.ParseQuery(query) // what parses is used: a missing field is reported below
	begin, err1 := strconv.ParseUint(q.Get("begin"), 10, 64)
	end, err2 := strconv.ParseUint(q.Get("end"), 10, 64)
	id, err3 := strconv.ParseInt(q.Get("to"), 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, 0, errors.New("move needs begin, end (keys) and to (a server node id), as decimal integers")
	}
	return begin, end, int32(id), nil
}

// parseDrain reads the query of POST /drain.
func parseDrain(query string) (int32, error) {
	q, _ := url.ParseQuery(query)
	id, err := strconv.ParseInt(q.Get("node"), 10, 32)
	if err != nil {
		return 0, errors.New("drain needs node (a server node id, e.g. 10)")
	}
	return int32(id), nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
