package coord

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/rebalance"
)

// StartBalancer starts the PSLD loop of po, an elastic scheduler: the
// migration coordinator, and the planner every PS_BALANCE_INTERVAL
// milliseconds of env (default 2000) from the moment the node is ready
// until ctx ends or the node stops.
func StartBalancer(ctx context.Context, po *postoffice.Postoffice, env postoffice.Getenv) (*Balancer, error) {
	ms, err := postoffice.IntFromEnv(env, "PS_BALANCE_INTERVAL", 2000, 1, 24*3600*1000,
		"the milliseconds between an elastic scheduler's rebalancing plans, e.g. 2000")
	if err != nil {
		return nil, err
	}
	c, err := New(po)
	if err != nil {
		return nil, err
	}
	if c.haltAfter, _ = env("ELASTICPS_TEST_MOVE_HALT"); c.haltAfter != "" {
		switch c.haltAfter {
		case PhasePrepare, PhaseRoutes, PhaseExport, PhaseImport, PhaseCommit:
		default:
			return nil, fmt.Errorf("ELASTICPS_TEST_MOVE_HALT=%q: expected %s, %s, %s, %s or %s (the phase of a move after which a test's scheduler stops)",
				c.haltAfter, PhasePrepare, PhaseRoutes, PhaseExport, PhaseImport, PhaseCommit)
		}
	}
	bal, err := NewBalancer(c, rebalance.DefaultConfig(), time.Duration(ms)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	go func() {
		select {
		case <-po.Ready():
			bal.Run(ctx)
		case <-ctx.Done():
		case <-po.Done():
		}
	}()
	return bal, nil
}

// StartScheduler starts everything an elastic scheduler runs beside its
// node, the same for 'elasticps scheduler' and a C++ program's scheduler
// (the bridge): the balancer (StartBalancer) and the control API of
// 'elasticps ctl' at PS_CTL_ADDR of env (default: the scheduler's host,
// DMLC_PS_ROOT_PORT+1), whose address it logs. Call it before po.Start,
// so that the coordinator takes the first load reports.
func StartScheduler(ctx context.Context, po *postoffice.Postoffice, env postoffice.Getenv) (*Balancer, error) {
	bal, err := StartBalancer(ctx, po, env)
	if err != nil {
		return nil, err
	}
	addr, _ := env("PS_CTL_ADDR")
	if addr == "" {
		addr = net.JoinHostPort(po.Config().SchedulerHost, strconv.Itoa(po.Config().SchedulerPort+1))
	}
	bound, err := bal.c.ServeControl(addr)
	if err != nil {
		return nil, err
	}
	po.Logger().Info("elastic: control API (elasticps ctl)", "addr", bound)
	return bal, nil
}
