package main

import (
	"bytes"
	"testing"

	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/stretchr/testify/assert"
)

// ctl status's tables: the job line, the last plan, one row per server
// (rank, node id, address, health, what it holds, its load), the routing
// table and the moves, in the table move and drain print too.
func TestPrintStatus(t *testing.T) {
	st := coord.Status{
		Epoch: 2, Moves: 1,
		Servers: []coord.ServerStatus{
			{Rank: 0, NodeID: 8, Address: "127.0.0.1:4000", Intervals: 1, Health: "ok", ReportAgeMs: 10},
			{Rank: 2, NodeID: 12, Address: "127.0.0.1:4002", Standby: true, Intervals: 2, Blocks: 2, Bytes: 96, Busy: 0.25,
				RequestsPerSec: 400, BytesPerSec: 19200, HandlingUs: 625, Health: "lagging"},
		},
		Intervals: []coord.IntervalStatus{{Begin: 0, End: 4, Server: 12}, {Begin: 4, End: 10, Server: 8, MigratingFrom: 12, CutSeq: 7}},
		LastMoves: []coord.MoveStatus{{Begin: 0, End: 4, From: 8, To: 12, Bytes: 61, Ms: 12.5}},
		LastPlan:  &coord.PlanStatus{AtMs: 4000, Kind: "exploit", Reason: "server 8 is the bottleneck", Moves: 1, MovedOK: 1},
	}
	var b bytes.Buffer
	printStatus(&b, st)
	assert.Equal(t, `routing epoch 2, servers [8 12], 1 moves (0 failed)
last plan at 4.0s: exploit, server 8 is the bottleneck (1 moves, 1 done)

server        rank  address         health   intervals  blocks  bytes  busy  req/s  bytes/s  handling
8             0     127.0.0.1:4000  ok       1          0       0 B    0%    0      0 B      -
12 (standby)  2     127.0.0.1:4002  lagging  2          2       96 B   25%   400    19.2 KB  625us

begin  end  server  migrating from  cut-over push
0      4    12                      
4      10   8       12              7

recent moves  from  to  bytes  ms    error
[0, 4)        8     12  61     12.5  
`, b.String())
}

// The demo's benchmark table: one row per placement, within 120 columns.
func TestPrintDemoRows(t *testing.T) {
	rows := []demoRow{
		{Config: "static (bandwidth straggler)", Placement: "static", ItPerSec: 1, SpeedUp: 1, VsOracle: 0.5},
		{Config: "elastic (bandwidth straggler)", Placement: "elastic", ItPerSec: 1.875, SpeedUp: 1.875, VsOracle: 0.9375},
		{Config: "oracle (bandwidth straggler)", Placement: "oracle", ItPerSec: 2, SpeedUp: 2, VsOracle: 1},
	}
	rows[1].Median.Moves = 12
	var b bytes.Buffer
	printDemoRows(&b, rows)
	assert.Equal(t, `                      placement  it/s per worker  vs static  vs oracle  moves
   static (bandwidth straggler)             1.00      1.00x        50%      -
  elastic (bandwidth straggler)             1.88      1.88x        94%     12
   oracle (bandwidth straggler)             2.00      2.00x       100%      -
`, b.String())
}
