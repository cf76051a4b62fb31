package anyvan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/memvan"
	"github.com/elasticps/elasticps/van/samehost"
	"github.com/elasticps/elasticps/van/tcp"
	"github.com/elasticps/elasticps/van/vantest"
)

func TestOpenByKind(t *testing.T) {
	tr, err := Open("tcp", van.Options{})
	require.NoError(t, err)
	assert.IsType(t, &tcp.Transport{}, tr)
	assert.NoError(t, tr.Close())

	tr, err = Open("carrier-pigeon", van.Options{})
	assert.Nil(t, tr, "no typed nil")
	assert.EqualError(t, err, `anyvan: unknown van "carrier-pigeon": use zmq, tcp, shm, samehost, ibverbs, fabric or mem`)

	_, err = Open("tcp", van.Options{WaterMark: -1})
	assert.ErrorContains(t, err, "van/tcp: Options.WaterMark must not be negative")
}

// TestShmAutoWrapsTCP: PS_SHM_AUTO=1 (or BytePS's BYTEPS_ENABLE_IPC=1)
// turns the tcp van into samehost; other vans are left as they are.
func TestShmAutoWrapsTCP(t *testing.T) {
	for _, env := range []string{samehost.Env, samehost.AliasEnv} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "1")
			tr, err := Open("tcp", van.Options{})
			require.NoError(t, err)
			assert.IsType(t, &samehost.Transport{}, tr)
			assert.NoError(t, tr.Close())
			tr, err = Open("mem", van.Options{})
			require.NoError(t, err)
			assert.IsType(t, &memvan.Transport{}, tr)
			assert.NoError(t, tr.Close())
		})
	}
	t.Setenv(samehost.Env, "on")
	_, err := Open("tcp", van.Options{})
	assert.ErrorContains(t, err, `PS_SHM_AUTO="on" is invalid`)
}

// TestMemSharesOneNetwork: two "mem" transports of one process reach each
// other, as the nodes of an in-process job must.
func TestMemSharesOneNetwork(t *testing.T) {
	a, err := Open("mem", van.Options{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, a.Close()) }()
	b, err := Open("mem", van.Options{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()
	assert.IsType(t, &memvan.Transport{}, a)

	node := message.NewNode(message.RoleServer)
	node.ID = 8
	port, err := a.Bind(node, 0)
	require.NoError(t, err)
	node.Port = int32(port)
	require.NoError(t, b.Connect(node, 9))
	_, err = b.Send(vantest.KVMsg(8, 5, true, false, vantest.U64s(1), []byte("v"), nil))
	require.NoError(t, err)
	m := vantest.MustRecv(t, a)
	assert.Equal(t, int32(9), m.Meta.Sender)
	assert.Equal(t, int32(5), m.Meta.Timestamp)
}

func TestFromTestEnv(t *testing.T) {
	t.Setenv(TestEnvVar, "")
	assert.Equal(t, "zmq", TestKind(), "the default")
	t.Setenv(TestEnvVar, " MEM ")
	assert.Equal(t, "mem", TestKind())
	tr, err := FromTestEnv(nil)
	require.NoError(t, err)
	assert.IsType(t, &memvan.Transport{}, tr)
	assert.NoError(t, tr.Close())

	t.Setenv(TestEnvVar, "nope")
	_, err = FromTestEnv(nil)
	assert.ErrorContains(t, err, `ELASTICPS_TEST_VAN="nope": anyvan: unknown van "nope"`)
}
