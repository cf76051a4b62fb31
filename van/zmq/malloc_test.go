package zmq

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/van"
)

// mallocChildEnv makes the test binary a child that opens a transport and
// prints whether a 1 MiB block is then mapped afresh (1) or not (0).
const mallocChildEnv = "EPS_TEST_MALLOC_CHILD"

// TestMallocThresholds checks, each in a fresh process (malloc's settings
// are per process and glibc's dynamic threshold remembers earlier frees),
// that New raises malloc's thresholds so that a 1 MiB block comes from the
// heap, and that it leaves them alone with KeepMalloc or when the
// environment sets them.
func TestMallocThresholds(t *testing.T) {
	if mode := os.Getenv(mallocChildEnv); mode != "" {
		tr, err := New(Config{Options: van.Options{KeepMalloc: mode == "keep"}})
		require.NoError(t, err)
		defer tr.Close()
		os.Stdout.WriteString("mmapped=" + strconv.Itoa(mmappedChunks(1<<20)) + "\n")
		return
	}
	if mmappedChunks(1) < 0 {
		t.Skip("not glibc: no malloc thresholds to set")
	}
	for _, c := range []struct {
		name string
		env  []string
		want int
	}{
		{"tuned", []string{mallocChildEnv + "=tune"}, 0},
		{"KeepMalloc", []string{mallocChildEnv + "=keep"}, 1},
		{"MALLOC_MMAP_THRESHOLD_ set", []string{mallocChildEnv + "=tune", "MALLOC_MMAP_THRESHOLD_=131072"}, 1},
		{"GLIBC_TUNABLES set", []string{mallocChildEnv + "=tune", "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMallocThresholds$", "-test.count=1")
			cmd.Env = append(os.Environ(), c.env...)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			i := strings.Index(string(out), "mmapped=")
			require.GreaterOrEqual(t, i, 0, "child printed no result: %s", out)
			got, err := strconv.Atoi(strings.Fields(string(out[i+len("mmapped="):]))[0])
			require.NoError(t, err, "%s", out)
			require.Equal(t, c.want, got, "1 MiB block mapped afresh (1) or from the heap (0)")
		})
	}
}
