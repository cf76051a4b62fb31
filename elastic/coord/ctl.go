package coord

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/elasticps/elasticps/routing"
)

// Status is what `elasticps ctl status` shows.
type Status struct {
	Epoch     uint64             `json:"epoch"`
	Servers   []int32            `json:"servers"`
	Intervals []routing.Interval `json:"intervals"`
	Moves     int                `json:"moves"`
	Failed    int                `json:"failed_moves"`
	LastMoves []MoveStatus       `json:"last_moves"`
}

// MoveStatus is one move in Status.
type MoveStatus struct {
	Begin, End uint64
	From, To   int32
	Bytes      int
	Millis     float64
	Error      string `json:",omitempty"`
}

// Status reports the routing table and the moves so far.
func (c *Coordinator) Status() Status {
	r := c.table.Current()
	st := Status{Epoch: r.Epoch, Servers: c.Servers(), Intervals: r.Intervals}
	h := c.History()
	for i, res := range h {
		if res.Err != nil {
			st.Failed++
		} else {
			st.Moves++
		}
		if i >= len(h)-20 {
			ms := MoveStatus{Begin: res.Move.Begin, End: res.Move.End, From: res.Move.From, To: res.Move.To,
				Bytes: res.Bytes, Millis: float64(res.Duration.Microseconds()) / 1000}
			if res.Err != nil {
				ms.Error = res.Err.Error()
			}
			st.LastMoves = append(st.LastMoves, ms)
		}
	}
	return st
}

// ServeControl serves the control API on addr (for `elasticps ctl`):
// GET /status, POST /move?begin=&end=&to=, POST /drain?node=. It returns
// the bound address.
func (c *Coordinator) ServeControl(addr string) (string, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, c.Status()) })
	mux.HandleFunc("POST /move", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		begin, err1 := strconv.ParseUint(q.Get("begin"), 10, 64)
		end, err2 := strconv.ParseUint(q.Get("end"), 10, 64)
		to, err3 := strconv.ParseInt(q.Get("to"), 10, 32)
		if err1 != nil || err2 != nil || err3 != nil {
			http.Error(w, "move needs begin, end (keys) and to (a server node id), as decimal integers", http.StatusBadRequest)
			return
		}
		res, err := c.Move(begin, end, int32(to))
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		writeJSON(w, MoveStatus{Begin: begin, End: end, From: res.Move.From, To: res.Move.To, Bytes: res.Bytes,
			Millis: float64(res.Duration.Microseconds()) / 1000})
	})
	mux.HandleFunc("POST /drain", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.URL.Query().Get("node"), 10, 32)
		if err != nil {
			http.Error(w, "drain needs node (a server node id, e.g. 10)", http.StatusBadRequest)
			return
		}
		res, err := c.Drain(int32(id))
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		writeJSON(w, map[string]any{"node": id, "moves": len(res), "left": true})
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

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
