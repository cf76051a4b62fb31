// Package nodeproc starts the one node that a process of this executable
// runs, for the roles, the demo and the benchmark nodes alike: its
// configuration from the DMLC_* / PS_* environment, its logger, its
// postoffice tied to the process's context, and an elastic scheduler's
// balancer.
package nodeproc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/internal/logfmt"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// Logger is the logger of a node process: logfmt's, to stderr, level info
// (the C++ bridge's nodes log the same way).
func Logger() *slog.Logger { return logfmt.New(os.Stderr, slog.LevelInfo) }

// Config reads the node configuration from the environment, checking that
// DMLC_ROLE is role, the role the command runs ("" = any).
func Config(role string) (postoffice.Config, error) {
	cfg, err := postoffice.ConfigFromEnv(postoffice.OSEnv)
	if err != nil {
		return cfg, err
	}
	if role != "" && cfg.Role.String() != role {
		hint := "run 'elasticps " + cfg.Role.String() + "'"
		if cfg.Role == message.RoleWorker {
			hint = "start your worker program instead (elasticps has no worker command)"
		}
		return cfg, fmt.Errorf("DMLC_ROLE=%s but 'elasticps %s' runs a %s: set DMLC_ROLE=%s, or %s", cfg.Role, role, role, role, hint)
	}
	cfg.Logger = Logger()
	cfg.ShareHostCPUs = true // this process runs one node
	return cfg, nil
}

// PlanConfig is the configuration of a benchmark node: the DMLC_*
// variables the launcher set, and the van the benchmark's plan names (""
// = the default). The user's own DMLC_PS_VAN_TYPE is ignored, so that it
// cannot override the plan.
func PlanConfig(van string) (postoffice.Config, error) {
	cfg, err := postoffice.ConfigFromEnv(func(k string) (string, bool) {
		if k == "DMLC_PS_VAN_TYPE" {
			return "", false
		}
		return os.LookupEnv(k)
	})
	if err != nil {
		return cfg, err
	}
	if van != "" {
		cfg.VanType = van
	}
	cfg.Logger = Logger()
	cfg.ShareHostCPUs = true // this process runs one node
	return cfg, nil
}

// Open opens the node's postoffice and stops it when ctx ends. The
// returned release stops it too, and must be called when the node is done.
func Open(ctx context.Context, cfg postoffice.Config) (po *postoffice.Postoffice, release func(), err error) {
	po, err = postoffice.Open(cfg)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, po.Stop)
	return po, func() {
		stop()
		po.Stop()
	}, nil
}

// StartWorker creates po's worker (app 0, customer 0; elastic mode's when
// the job is elastic) and starts the node with a barrier. The caller
// closes the worker.
func StartWorker(po *postoffice.Postoffice) (*kv.Worker, error) {
	en, err := elastic.Open(po)
	if err != nil {
		return nil, err
	}
	w, err := en.NewWorker(0, 0)
	if err != nil {
		return nil, err
	}
	if err := po.StartWithBarrier(0); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// StartBalancer starts the PSLD loop of an elastic scheduler: the
// migration coordinator, and the planner every PS_BALANCE_INTERVAL
// milliseconds (default 2000) from the moment the node is ready until ctx
// ends.
func StartBalancer(ctx context.Context, po *postoffice.Postoffice) (*coord.Coordinator, *coord.Balancer, error) {
	bal, err := coord.StartBalancer(ctx, po, postoffice.OSEnv)
	if err != nil {
		return nil, nil, err
	}
	return bal.Coordinator(), bal, nil
}

// LoopbackEnv is the environment that keeps a local job's nodes on
// loopback.
func LoopbackEnv() []string {
	return []string{"DMLC_PS_ROOT_URI=127.0.0.1", "DMLC_NODE_HOST=127.0.0.1"}
}

// ReadResult decodes the JSON result file a node process wrote at exit.
func ReadResult(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("missing node results: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ReadPlan decodes the JSON plan a launcher hands a node process in
// environment variable env; node and starter name the process and the
// command that starts it, for the error a process started by hand gets.
func ReadPlan(env, node, starter string, v any) error {
	if err := json.Unmarshal([]byte(os.Getenv(env)), v); err != nil {
		return fmt.Errorf("%s: %v (%s is started by '%s')", env, err, node, starter)
	}
	return nil
}
