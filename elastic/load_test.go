package elastic

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/memvan"
)

// PS_REPORT_INTERVAL comes from the node's environment (Config.Env, where
// a bridge node's setenv lands), not the Go runtime's copy of it; an
// invalid value is named in a warning and the default is taken.
func TestReportIntervalFromTheNodesEnv(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
		warns bool
	}{{"", time.Second, false}, {"250", 250 * time.Millisecond, false}, {"-5", time.Second, true}, {"fast", time.Second, true}} {
		var logs bytes.Buffer
		env := map[string]string{"PS_REPORT_INTERVAL": tc.value}
		cfg := postoffice.Config{Role: message.RoleServer, NumServers: 1, NumWorkers: 1,
			SchedulerHost: "127.0.0.1", SchedulerPort: 9000,
			Env:    func(k string) (string, bool) { v, ok := env[k]; return v, ok },
			Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		tr, err := memvan.NewNetwork().NewTransport(van.Options{})
		require.NoError(t, err)
		po, err := postoffice.New(cfg, tr)
		require.NoError(t, err)
		assert.Equal(t, tc.want, reportInterval(po), "PS_REPORT_INTERVAL=%q", tc.value)
		assert.Equal(t, tc.warns, bytes.Contains(logs.Bytes(), []byte("PS_REPORT_INTERVAL is invalid")), "PS_REPORT_INTERVAL=%q: %s", tc.value, logs.String())
		_ = tr.Close()
	}
}
