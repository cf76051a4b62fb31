package syncctl

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExportImportRoundTrip moves keys [1, 3) of a controller to a fresh
// one, which then decides exactly as a twin that kept them.
func TestExportImportRoundTrip(t *testing.T) {
	history := []step{
		push(1, true).on(1, 2, 5), push(2, true).on(1, 2, 5), push(3, true).on(1, 2, 5),
		pull(1, true).on(1, 2, 5), pull(2, true).on(1, 2, 5), pull(3, true).on(1, 2, 5),
		push(1, true).on(1, 2), push(3, true).on(2), push(1, true).on(1),
	}
	// A pull of round 3 and more rounds, with a join and a leave.
	after := []step{
		pull(1, false).on(1), push(2, true).on(1, 2), pull(2, false).on(1, 2), push(3, true).on(1),
		step{do: "join", node: 4}, pull(4, false).on(2), push(3, true).on(2), leave(3), push(2, true).on(1),
		pull(1, false).on(1, 2), push(4, true).on(1, 2), push(1, true).on(2), push(2, true).on(2),
	}
	for _, cfg := range []Config{{Mode: BSP}, {Mode: SSP, Staleness: 1}, {Mode: Fluent, Staleness: 1, PauseProb: 0.5}} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			twin, moved := newTwin(t, cfg), newTwin(t, cfg)
			for _, c := range []*twinned{twin, moved} {
				for _, s := range history {
					c.apply(s)
				}
			}
			require.Equal(t, twin.decisions, moved.decisions)
			state, parked, _ := moved.c.Export(1, 3)
			require.Empty(t, parked)
			fresh := newTwin(t, cfg)
			fresh.n, fresh.draws = moved.n, moved.draws
			rel, err := fresh.c.Import(state)
			require.NoError(t, err)
			assert.Empty(t, rel)
			twin.decisions, fresh.decisions = nil, nil
			for _, s := range after {
				twin.apply(s)
				fresh.apply(s)
			}
			assert.Equal(t, twin.decisions, fresh.decisions)
			assert.NotEmpty(t, parkedSome(twin.decisions), "the steps exercise parking")

			// The source kept key 5 and nothing of keys 1 and 2.
			again, _, _ := moved.c.Export(0, 10)
			ks, err := decodeState(again)
			require.NoError(t, err)
			require.Len(t, ks, 1)
			assert.Equal(t, uint64(5), ks[0].key)
		})
	}
}

// twinned plays steps on a controller and records its decisions; its
// Rand draws 0.3 and 0.7 in turn.
type twinned struct {
	t         *testing.T
	c         *Controller
	n         uint64
	draws     int
	decisions []string
}

func newTwin(t *testing.T, cfg Config) *twinned {
	tw := &twinned{t: t}
	cfg.Rand = func() float64 { tw.draws++; return []float64{0.3, 0.7}[tw.draws%2] }
	tw.c = newController(t, cfg, 1, 2, 3)
	return tw
}

func (tw *twinned) apply(s step) {
	tw.n++
	var run bool
	var rel []uint64
	switch s.do {
	case "join":
		rel = tw.c.Join(s.node)
	case "leave":
		rel = tw.c.Leave(s.node)
	default:
		run, rel = tw.c.Admit(Request{ID: tw.n, Worker: Worker{Node: s.node}, Keys: s.keys, Push: s.do != "pull", Pull: s.do != "push"})
	}
	tw.decisions = append(tw.decisions, fmtDecision(tw.n, s, run, rel))
}

func fmtDecision(id uint64, s step, run bool, rel []uint64) string {
	return fmt.Sprintf("%d %s %d: run %v released %v", id, s.do, s.node, run, rel)
}

func parkedSome(ds []string) []string {
	var out []string
	for _, d := range ds {
		if strings.Contains(d, "run false") {
			out = append(out, d)
		}
	}
	return out
}

func TestImportRejectsABadStateAndChangesNothing(t *testing.T) {
	src := newSim(t, Config{Mode: BSP}, 1, 2)
	src.play(push(1, true).on(1, 2), push(2, true).on(1), pull(1, true).on(1))
	state, _, _ := src.c.Export(0, 10)

	dst := newController(t, Config{Mode: BSP}, 1, 2)
	for n := range len(state) {
		_, err := dst.Import(state[:n])
		assert.Error(t, err, "a state cut at %d of %d bytes", n, len(state))
	}
	bad := func(ks ...*keyState) []byte { return encodeState(ks) }
	for _, tc := range []struct {
		state []byte
		want  string
	}{
		{[]byte("hello world"), `without the "syncctl1" header`},
		{append([]byte("syncctl2"), state[8:]...), `version '2', this controller reads '1'`},
		{append(state[:len(state):len(state)], 0), "1 bytes after the last key"},
		{bad(&keyState{key: 2}, &keyState{key: 1}), "key 1 after key 2: keys must ascend"},
		{bad(&keyState{key: 3, tmin: 2, entries: []entry{{clock: 1}}}), "key 3 entry #0: clock 1 below t_min 2"},
		{bad(&keyState{key: 3, entries: []entry{{w: Worker{Node: 1}}, {w: Worker{Node: 1}, placeholder: true}}}), "key 3 entry #1: worker 1/0 appears twice"},
		{bad(&keyState{key: 3, entries: []entry{{placeholder: true, owes: true}}}), "a placeholder cannot owe a pull"},
		{append(bad(&keyState{key: 3, entries: []entry{{}}})[:12], 4, 0, 0, 0), "key 3 entry #0: unknown flags 0x4"},
	} {
		_, err := dst.Import(tc.state)
		if assert.Error(t, err, tc.want) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
	assert.Equal(t, Stats{}, dst.Stats())
	rel, err := dst.Import(state)
	require.NoError(t, err, "nothing of the bad imports stayed")
	assert.Empty(t, rel)

	_, err = dst.Import(state)
	assert.ErrorContains(t, err, "key 1 already has sync state here")
	m := &sim{t: t, c: dst, n: 3}
	// The imported clocks decide: key 1 at t_min 1, key 2 waits for 2's push.
	m.play(pull(2, true).on(1), pull(1, false).on(2), push(2, true, 5).on(2))
}

func TestImportDropsTheClocksOfANodeThatLeftHere(t *testing.T) {
	src := newSim(t, Config{Mode: SSP}, 1, 2)
	src.play(push(1, true), push(1, true))
	state, _, _ := src.c.Export(0, 10)

	dst := newController(t, Config{Mode: SSP}, 1, 2)
	assert.Empty(t, dst.Leave(2))
	_, err := dst.Import(state)
	require.NoError(t, err)
	m := &sim{t: t, c: dst, n: 2}
	m.play(pull(1, true)) // node 2 (at 0) is gone: t_min 2
}
