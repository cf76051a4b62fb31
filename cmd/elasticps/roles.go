package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// statsHead is the SimpleApp head a worker sends to ask a server for its
// traffic counters; the reply body is "requests bytes_in bytes_out".
const statsHead = -7301

// runRole runs a scheduler or a server the way ps-lite's test programs do
// (ps::Start with its barrier, then ps::Finalize with its barrier), so it
// can stand in for a C++ scheduler or server in a mixed job. The server
// uses the element-wise sum store.
func runRole(ctx context.Context, role string) error {
	cfg, err := nodeproc.Config(role)
	if err != nil {
		return err
	}
	po, release, err := nodeproc.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer release()
	if cfg.Role == message.RoleServer {
		en, err := elastic.Open(po)
		if err != nil {
			return err
		}
		store := kv.NewDefaultHandler()
		// the sum store copies what it keeps; in an elastic job it hands
		// key ranges over itself
		srv, err := en.NewServer(0, kv.ServerOptions{Handler: store.Handle, ReleaseRequests: true}, store)
		if err != nil {
			return err
		}
		defer srv.Close()
		serveStats(po, srv.Simple())
	}
	var bal *coord.Balancer
	if cfg.Role == message.RoleScheduler && cfg.Elastic {
		if bal, err = startBalancer(ctx, po); err != nil {
			return err
		}
	}
	if err := po.Start(0); err != nil {
		return fmt.Errorf("%s start: %w", role, err)
	}
	// A node that replaced a dead one, or joined as a standby, skips the
	// start barrier, which the others passed long ago (MXNet and BytePS do
	// the same after a recovery).
	if !po.IsRecovery() && !po.IsStandby() {
		if err := po.Barrier(0, message.AllGroup); err != nil {
			return fmt.Errorf("%s start barrier: %w", role, err)
		}
	}
	if po.Verbose() >= 1 {
		po.Logger().Info("started", "node", po.MyNode().String())
	}
	if po.IsStandby() {
		// A standby is in no barrier group: it serves until the scheduler
		// releases it at the end of the job (or drains it).
		select {
		case <-po.Done():
		case <-ctx.Done():
		}
		if po.Left() {
			return nil
		}
		return ctx.Err()
	}
	if bal != nil {
		if err := po.Barrier(0, message.AllGroup); err != nil {
			return fmt.Errorf("%s finalize: %w", role, err)
		}
		bal.Coordinator().ReleaseStandbys()
		po.Stop()
		return ctx.Err()
	}
	if err := po.Finalize(0, true); err != nil {
		if po.Left() {
			po.Logger().Info("drained by the scheduler; leaving the job")
			return nil
		}
		return fmt.Errorf("%s finalize: %w", role, err)
	}
	return ctx.Err()
}

// serveStats answers statsHead requests with the node's traffic counters;
// other SimpleApp requests get ps-lite's default empty reply.
func serveStats(po *postoffice.Postoffice, app *kv.SimpleApp) {
	app.SetRequestHandler(func(d kv.SimpleData, a *kv.SimpleApp) {
		body := ""
		if d.Head == statsHead {
			st := po.Stats()
			body = strconv.FormatInt(st.MsgsRecv.Load(), 10) + " " +
				strconv.FormatInt(st.BytesRecv.Load(), 10) + " " +
				strconv.FormatInt(st.BytesSent.Load(), 10)
		}
		if err := a.Response(d, []byte(body)); err != nil {
			po.Logger().Error("cannot answer a command", "err", err)
		}
	})
}

// startBalancer runs the PSLD loop on an elastic scheduler (see
// nodeproc.StartBalancer) and serves its control API at PS_CTL_ADDR
// (default: the scheduler's host, DMLC_PS_ROOT_PORT+1).
func startBalancer(ctx context.Context, po *postoffice.Postoffice) (*coord.Balancer, error) {
	c, bal, err := nodeproc.StartBalancer(ctx, po)
	if err != nil {
		return nil, err
	}
	addr := os.Getenv("PS_CTL_ADDR")
	if addr == "" {
		addr = fmt.Sprintf("%s:%d", po.Config().SchedulerHost, po.Config().SchedulerPort+1)
	}
	bound, err := c.ServeControl(addr)
	if err != nil {
		return nil, err
	}
	po.Logger().Info("elastic: control API (elasticps ctl)", "addr", bound)
	return bal, nil
}
