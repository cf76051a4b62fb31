package postoffice_test

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van"
)

// A job with PS_ENCRYPT=on, over each van that has encryption: it pushes
// and pulls exact sums, and a stranger that speaks the van's plaintext
// protocol as the scheduler (a TERMINATE to a worker) is refused at the
// handshake and counted; the worker keeps running.
func TestEncryptedJob(t *testing.T) {
	for _, kind := range []string{"zmq", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			logs := &testutil.SyncBuffer{}
			j := jobtest.Start(t, jobtest.Options{Servers: 1, Workers: 2, Van: kind, Configure: func(c *postoffice.Config) {
				c.AuthToken = jobToken
				c.Encryption = &van.Encryption{Secret: []byte(jobToken)}
				c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			}})
			w0 := j.Workers[0]
			terminate := message.NewMeta()
			terminate.Control.Cmd = message.CmdTerminate
			if kind == "zmq" {
				s := stranger(t, w0.MyNode(), "ps1")
				_, err := s.SendBytes(message.EncodeMeta(&terminate), 0)
				require.NoError(t, err)
			} else {
				c, err := net.Dial("tcp", net.JoinHostPort(w0.MyNode().Hostname, strconv.Itoa(int(w0.MyNode().Port))))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				meta := message.EncodeMeta(&terminate)
				hello := []byte{'E', 'P', 'S', 'V', 1, 0, 0, 0, 1, 0, 0, 0} // tcp van hello of node 1
				frame := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(hello, 1), uint32(len(meta)))
				_, err = c.Write(append(frame, meta...))
				require.NoError(t, err)
			}
			testutil.WaitFor(t, 10*time.Second, func() bool { return w0.LimitRefusals()[van.ReasonEncrypt] >= 1 },
				func() string { return logs.String() })
			pushPullSums(t, j)
			select {
			case <-w0.Done():
				t.Fatal("the stranger's TERMINATE stopped the worker")
			default:
			}
			assert.Contains(t, logs.String(), "reason=encryption")
		})
	}
}

// PS_ENCRYPT and the key-file variables: bad values and missing keys are
// refused with the variable named, and so is a van without encryption.
func TestEncryptEnv(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "curve.key")
	require.NoError(t, os.WriteFile(keyFile, make([]byte, 32), 0o600))
	c, err := postoffice.ConfigFromEnv(workerEnv(nil))
	require.NoError(t, err)
	assert.Nil(t, c.Encryption, "off by default")
	c, err = postoffice.ConfigFromEnv(workerEnv(map[string]string{"PS_ENCRYPT": "on", "PS_AUTH_TOKEN": "t"}))
	require.NoError(t, err)
	require.NotNil(t, c.Encryption)
	assert.Equal(t, []byte("t"), c.Encryption.Secret)
	c, err = postoffice.ConfigFromEnv(workerEnv(map[string]string{"PS_ENCRYPT": "on", "PS_CURVE_SECRET_KEY_FILE": keyFile}))
	require.NoError(t, err, "a key file needs no token")
	assert.Equal(t, keyFile, c.Encryption.CurveSecretKeyFile)

	var ee *postoffice.EnvError
	for _, tc := range []struct {
		env       map[string]string
		variable  string
		wantInMsg string
	}{
		{map[string]string{"PS_ENCRYPT": "yes"}, "PS_ENCRYPT", "off (the default) or on"},
		{map[string]string{"PS_ENCRYPT": "on"}, "PS_AUTH_TOKEN", "derives the keys from it"},
		{map[string]string{"PS_ENCRYPT": "on", "DMLC_PS_VAN_TYPE": "tcp", "PS_CURVE_SECRET_KEY_FILE": keyFile}, "PS_AUTH_TOKEN", "PS_TLS_CERT_FILE"},
		{map[string]string{"PS_CURVE_SECRET_KEY_FILE": keyFile}, "PS_ENCRYPT", "only encryption reads it"},
	} {
		_, err := postoffice.ConfigFromEnv(workerEnv(tc.env))
		require.True(t, errors.As(err, &ee), "%v: %v", tc.env, err)
		assert.Equal(t, tc.variable, ee.Var)
		assert.ErrorContains(t, err, tc.wantInMsg)
	}

	c, err = postoffice.ConfigFromEnv(workerEnv(map[string]string{"PS_ENCRYPT": "on", "PS_AUTH_TOKEN": "t", "DMLC_PS_VAN_TYPE": "shm"}))
	require.NoError(t, err)
	_, err = postoffice.NewTransport(c)
	assert.ErrorContains(t, err, "PS_ENCRYPT=on needs DMLC_PS_VAN_TYPE=zmq (CURVE) or tcp (TLS)")
}
