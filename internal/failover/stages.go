package failover

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/stats"
)

// Stage is one step of the failover path, over every kill: from the end
// of the previous stage to the log line that ends this one (the nodes'
// log times have millisecond resolution).
type Stage struct {
	Name  string  `json:"name"`
	What  string  `json:"what"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// stageNames, in path order; what each measures is in stageWhat.
var (
	stageNames = []string{"detect", "table", "resend", "reseed"}
	stageWhat  = []string{
		"SIGKILL to the scheduler declaring the server dead",
		"declared dead to the failover table acknowledged by every node",
		"table acknowledged to the worker's first acknowledged push",
		"declared dead to the last new backup seeded",
	}
)

// deadAddrRE finds the ps address in the scheduler's "is dead" line.
var deadAddrRE = regexp.MustCompile(`node server\[id=\d+, ([^\]]+)\] is dead`)

// describe is one kill's stages for a progress line.
func (k kill) describe() string {
	if !k.complete {
		return "stages not in the logs"
	}
	how := "memberlist's probes"
	switch {
	case k.byLifeline:
		how = "lifeline"
	case !k.byGossip:
		how = "heartbeats"
	}
	st := k.stages()
	var parts []string
	for i, name := range stageNames {
		parts = append(parts, fmt.Sprintf("%s %s", name, cli.FormatNum(st[i])))
	}
	return fmt.Sprintf("%s ms; found by %s", strings.Join(parts, ", "), how)
}

// kill is what the logs say about one kill.
type kill struct {
	at                 time.Time // the SIGKILL
	declared, table    time.Time // the scheduler's lines
	acked, seeded      time.Time // the worker's acknowledgement, the last seeding
	byGossip, complete bool
	byLifeline         bool // the scheduler's member found it through its lifeline
}

// stages are the durations of k's stages, in stageNames order, in ms.
func (k kill) stages() []float64 {
	ms := func(a, b time.Time) float64 { return float64(b.Sub(a)) / 1e6 }
	return []float64{ms(k.at, k.declared), ms(k.declared, k.table), ms(k.table, k.acked), ms(k.declared, k.seeded)}
}

// summarize gives each stage's p50, p99 and max over kills.
func summarize(kills []kill) []Stage {
	var out []Stage
	for i, name := range stageNames {
		var xs []float64
		for _, k := range kills {
			if k.complete {
				xs = append(xs, k.stages()[i])
			}
		}
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		out = append(out, Stage{Name: name, What: stageWhat[i], P50MS: stats.Quantile(xs, 0.5), P99MS: stats.Quantile(xs, 0.99), MaxMS: xs[len(xs)-1]})
	}
	return out
}

// logTime is the time of a log line, "time=2006-01-02T15:04:05.000Z ...".
func logTime(line string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	stamp, _, _ := strings.Cut(rest, " ")
	t, err := time.Parse(time.RFC3339Nano, stamp)
	return t, err == nil
}

// firstLine is the time and text of the first line of out logged at or
// after from that contains every one of parts.
func firstLine(out string, from time.Time, parts ...string) (time.Time, string, bool) {
	from = from.Truncate(time.Millisecond) // the logs' resolution
	for line := range strings.Lines(out) {
		if t, ok := logTime(line); ok && !t.Before(from) && containsAll(line, parts) {
			return t, line, true
		}
	}
	return time.Time{}, "", false
}

// lastLineAfter is the time of the last line of out at or after from that
// contains every one of parts.
func lastLineAfter(out string, from time.Time, parts ...string) (time.Time, bool) {
	var last time.Time
	from = from.Truncate(time.Millisecond)
	for line := range strings.Lines(out) {
		if t, ok := logTime(line); ok && !t.Before(from) && containsAll(line, parts) {
			last = t
		}
	}
	return last, !last.IsZero()
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// readKill fills in k from the scheduler's and the servers' logs, for the
// kill of server id.
func readKill(k *kill, id int, sched string, servers []string) {
	declared, line, ok := firstLine(sched, k.at, fmt.Sprintf("node server[id=%d,", id), "is dead:")
	if !ok {
		return
	}
	table, _, ok := firstLine(sched, declared, `msg="coord: failover"`, fmt.Sprintf(" dead=%d ", id))
	if !ok {
		return
	}
	var seeded time.Time
	for _, s := range servers {
		if t, ok := lastLineAfter(s, k.at, "elastic: backup seeded"); ok && t.After(seeded) {
			seeded = t
		}
	}
	k.declared, k.table, k.seeded = declared, table, seeded
	k.byGossip = strings.Contains(line, "gossip")
	if m := deadAddrRE.FindStringSubmatch(line); m != nil {
		_, _, k.byLifeline = firstLine(sched, k.at, "member failed: its connection closed", "peer=server-"+m[1]+" ")
	}
	k.complete = !seeded.IsZero()
}
