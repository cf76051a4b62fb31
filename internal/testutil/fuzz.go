package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzCorpusEnv, set to "write", makes FuzzSeeds write its seeds into the
// package's testdata/fuzz/<target>/ as well: that committed corpus is what
// `go test` replays and `go test -fuzz` starts from, so regenerate it
// (ELASTICPS_FUZZ_CORPUS=write go test -run '^FuzzX$' ./pkg) when an
// encoding changes.
const FuzzCorpusEnv = "ELASTICPS_FUZZ_CORPUS"

// FuzzSeeds adds each seed (a frame a real encoder produced) to the fuzz
// target's corpus.
func FuzzSeeds(f *testing.F, seeds ...[]byte) {
	f.Helper()
	for _, s := range seeds {
		f.Add(s)
	}
	if os.Getenv(FuzzCorpusEnv) != "write" {
		return
	}
	dir := filepath.Join("testdata", "fuzz", f.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	for i, s := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			f.Fatal(err)
		}
	}
}
