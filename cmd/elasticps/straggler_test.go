package main

import (
	"slices"
	"testing"
)

func TestParseStragglerArgs(t *testing.T) {
	o, err := parseStragglerArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Servers != 4 || o.Workers != 4 || o.Van != "zmq" || o.Placement != "mxnet" || o.Straggler != "bandwidth" ||
		o.Slowdown != 4 || !o.Healthy || !slices.Equal(o.Runs, []string{"static", "elastic", "oracle"}) || o.Plot != "straggler.svg" {
		t.Errorf("defaults %+v", o)
	}
	o, err = parseStragglerArgs([]string{"-s", "2", "-w", "3", "--placement", "byteps", "--bandwidth", "50", "--straggler", "cpu", "--placements", "elastic,static", "--healthy=false"})
	if err != nil || o.Servers != 2 || o.Workers != 3 || o.Bandwidth != 50e6 || o.Straggler != "cpu" || !slices.Equal(o.Runs, []string{"elastic", "static"}) {
		t.Errorf("%+v %v", o, err)
	}
	for _, bad := range [][]string{{"--van", "udp"}, {"--placement", "ring"}, {"--straggler", "disk"}, {"--slow-rank", "4"},
		{"--warmup", "30s"}, {"--placements", "fast"}, {"--scale", "0.5"}, {"extra"}} {
		if _, err := parseStragglerArgs(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
