package e2e

import (
	"fmt"
	"testing"
)

// jobSpec describes a job of elasticps processes for startJob: the
// scheduler and servers run `elasticps`, the workers this test binary as
// the e2e node kind node.
type jobSpec struct {
	env       func(extra ...string) []string // every process's environment, plus extra
	servers   int
	serverEnv func(i int) []string // server i's extra environment (nil: none)
	workers   int
	node      string // the workers' ELASTICPS_E2E_NODE
	signal    string // the workers' E2E_SIGNAL_FILE ("": not set)
	pushing   string // the line each worker logs once it pushes ("": not waited for)
}

// e2eJob is a running job started by startJob.
type e2eJob struct {
	sched   *proc
	servers []*proc
	workers []*proc
	all     []*proc // every process started, also later ones (add): logged if the test fails
}

// startJob starts the scheduler, the servers and the workers of spec, logs
// every process's output if the test fails, and waits until each worker
// logged spec.pushing.
func startJob(t *testing.T, spec jobSpec) *e2eJob {
	t.Helper()
	j := newE2EJob(t)
	j.sched = j.add(start(t, "scheduler", spec.env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler"))
	for i := range spec.servers {
		extra := []string{"DMLC_ROLE=server"}
		if spec.serverEnv != nil {
			extra = append(extra, spec.serverEnv(i)...)
		}
		j.servers = append(j.servers, j.add(start(t, fmt.Sprintf("server%d", i), spec.env(extra...), elasticpsBin, "server")))
	}
	for i := range spec.workers {
		extra := []string{"DMLC_ROLE=worker", "ELASTICPS_E2E_NODE=" + spec.node}
		if spec.signal != "" {
			extra = append(extra, "E2E_SIGNAL_FILE="+spec.signal)
		}
		j.workers = append(j.workers, j.add(start(t, fmt.Sprintf("worker%d", i), spec.env(extra...), selfExe(t))))
	}
	if spec.pushing != "" {
		for _, w := range j.workers {
			w.waitFor(t, spec.pushing)
		}
	}
	return j
}

// newE2EJob returns an empty job whose processes (add) are logged if the
// test fails.
func newE2EJob(t *testing.T) *e2eJob {
	j := &e2eJob{}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range j.all {
				t.Logf("%s:\n%s", p.name, p.output())
			}
		}
	})
	return j
}

// add records p, a process of the job started later (a restarted node, a
// standby), so that its output is logged if the test fails.
func (j *e2eJob) add(p *proc) *proc {
	j.all = append(j.all, p)
	return p
}
