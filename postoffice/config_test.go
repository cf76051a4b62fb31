package postoffice

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/elasticps/elasticps/message"
)

func envOf(kv map[string]string) Getenv {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func baseEnv() map[string]string {
	return map[string]string{
		"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1",
		"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9091", "DMLC_NODE_HOST": "127.0.0.1",
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := baseEnv()
	env["PS_HEARTBEAT_INTERVAL"] = "2"
	env["PS_HEARTBEAT_TIMEOUT"] = "5"
	env["PS_RESEND"] = "1"
	env["PS_VERBOSE"] = "2"
	env["DMLC_LOCAL"] = "1"
	env["PORT"] = "7777"
	env["PS_INLINE_HANDOVER_US"] = "500"
	c, err := ConfigFromEnv(envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Role != message.RoleWorker || c.NumWorkers != 2 || c.NumServers != 1 || c.SchedulerPort != 9091 ||
		c.HeartbeatInterval != 2*time.Second || c.HeartbeatTimeout != 5*time.Second || !c.Resend ||
		c.ResendTimeout != time.Second || c.Verbose != 2 || !c.Local || c.Port != 7777 || c.NodeHost != "127.0.0.1" ||
		c.InlineHandOver != 500*time.Microsecond || c.KeepMalloc {
		t.Fatalf("unexpected config %+v", c)
	}
	env["PS_ZMQ_TUNE_MALLOC"] = "0"
	if c, err = ConfigFromEnv(envOf(env)); err != nil || !c.KeepMalloc {
		t.Fatalf("PS_ZMQ_TUNE_MALLOC=0: KeepMalloc %v, err %v; want true, nil", c.KeepMalloc, err)
	}
}

// Each missing or invalid variable is named in one clear message.
func TestConfigFromEnvErrors(t *testing.T) {
	cases := []struct {
		name, key, val, wantVar, wantText string
	}{
		{"missing role", "DMLC_ROLE", "", "DMLC_ROLE", "is not set: set it to worker, server or scheduler"},
		{"bad role", "DMLC_ROLE", "master", "DMLC_ROLE", `DMLC_ROLE="master" is invalid: expected worker, server or scheduler`},
		{"missing workers", "DMLC_NUM_WORKER", "", "DMLC_NUM_WORKER", "is not set"},
		{"bad workers", "DMLC_NUM_WORKER", "two", "DMLC_NUM_WORKER", "expected the number of workers"},
		{"negative servers", "DMLC_NUM_SERVER", "-1", "DMLC_NUM_SERVER", "integer >= 0"},
		{"missing uri", "DMLC_PS_ROOT_URI", "", "DMLC_PS_ROOT_URI", "scheduler's IP address"},
		{"missing port", "DMLC_PS_ROOT_PORT", "", "DMLC_PS_ROOT_PORT", "is not set"},
		{"port range", "DMLC_PS_ROOT_PORT", "70000", "DMLC_PS_ROOT_PORT", "1-65535"},
		{"bad heartbeat", "PS_HEARTBEAT_INTERVAL", "1s", "PS_HEARTBEAT_INTERVAL", "seconds"},
		{"bad hand-over", "PS_INLINE_HANDOVER_US", "-2", "PS_INLINE_HANDOVER_US", "-1 to run every handler on its customer's goroutine"},
		{"bad van", "DMLC_PS_VAN_TYPE", "carrier-pigeon", "DMLC_PS_VAN_TYPE", "zmq"},
		{"bad malloc tuning", "PS_ZMQ_TUNE_MALLOC", "yes", "PS_ZMQ_TUNE_MALLOC", "0 or 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := baseEnv()
			if tc.val == "" {
				delete(env, tc.key)
			} else {
				env[tc.key] = tc.val
			}
			_, err := ConfigFromEnv(envOf(env))
			var ee *EnvError
			if !errors.As(err, &ee) || ee.Var != tc.wantVar {
				t.Fatalf("err = %v, want EnvError for %s", err, tc.wantVar)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("error %q does not contain %q", err, tc.wantText)
			}
		})
	}
}
