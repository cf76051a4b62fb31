//go:build rdma && cgo

package rdma

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// TestVerbsWithoutDevice: on a host with no RDMA device (this one, CI) the
// ibverbs backend fails at once with one clear error; with a device it
// must open, bind and close cleanly.
func TestVerbsWithoutDevice(t *testing.T) {
	start := time.Now()
	tr, err := New(Config{Options: van.Options{Logger: quiet()}, Backend: Verbs})
	if err == nil {
		defer tr.Close()
		_, err = tr.Bind(message.Node{Hostname: "127.0.0.1"}, 0)
		t.Skipf("this host has an RDMA device (Bind: %v): the no-device path is not reachable", err)
	}
	assert.Less(t, time.Since(start), 2*time.Second, "no hang")
	require.True(t, errors.Is(err, ErrNoDevice), "got %v", err)
	assert.Equal(t, "van/rdma: no RDMA device found (ibv_get_device_list returned 0 devices); use DMLC_ENABLE_RDMA=fabric or zmq", err.Error())
}

func TestPickDeviceNamesTheInterface(t *testing.T) {
	_, err := pickDevice(Config{Options: van.Options{Host: "127.0.0.1"}})
	if err == nil {
		t.Skip("loopback is backed by an RDMA device here (rxe/siw)")
	}
	assert.ErrorContains(t, err, "no RDMA device backs interface lo")
	_, err = pickDevice(Config{Interface: "no-such-if"})
	assert.ErrorContains(t, err, "no network interface named no-such-if*")
	_, err = pickDevice(Config{Options: van.Options{Host: "192.0.2.255"}})
	assert.ErrorContains(t, err, "not an address of this host")
	c, err := pickDevice(Config{})
	require.NoError(t, err)
	assert.Empty(t, c.device, "no hint: the library's first device")
}
