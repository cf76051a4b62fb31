package cli

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitListDropsEmptyItems(t *testing.T) {
	assert.Equal(t, []string{"a", "b c", "d"}, SplitList(" a, ,b c,,d ,"))
	assert.Nil(t, SplitList(""))
	assert.Nil(t, SplitList(" , "))
}

func TestProgressOnATerminal(t *testing.T) {
	var b bytes.Buffer
	p := &Progress{w: &b, tty: true}
	p.Update("one")
	p.Update("one") // unchanged: not drawn again
	p.Starting("run")
	p.Update("two")
	p.Finished("run: done")
	p.Done() // the line was finished: nothing to clear
	p.Update("three")
	p.Done()
	assert.Equal(t, "\r\033[Kone\r\033[Ktwo\r\033[Krun: done\n\r\033[Kthree\r\033[K", b.String())
}

func TestProgressElsewherePrintsOnlyStartsAndEnds(t *testing.T) {
	var b bytes.Buffer
	p := &Progress{w: &b}
	p.Update("one")
	p.Starting("run")
	p.Update("two")
	p.Finished("run: done")
	p.Done()
	assert.Equal(t, "run ...\nrun: done\n", b.String())
}

func TestFormatNum(t *testing.T) {
	for v, want := range map[float64]string{1234.5: "1234", 12.34: "12.3", 1.234: "1.23", -0.5: "-0.50", math.NaN(): "-", math.Inf(1): "-"} {
		assert.Equal(t, want, FormatNum(v), "%v", v)
	}
}

func TestLastLines(t *testing.T) {
	assert.Equal(t, "b\nc", LastLines("a\nb\nc\n", 2))
	assert.Equal(t, "a", LastLines("a", 5))
}

func TestFlagErrorNamesLongFlagsWithTwoDashes(t *testing.T) {
	fs := flag.NewFlagSet("elasticps x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("s", 0, "")
	fs.Float64("lr", 0, "")
	fs.String("worker-cmd", "", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"-b"}, "flag provided but not defined: -b"},
		{[]string{"--lr", "x"}, `invalid value "x" for flag --lr: parse error`},
		{[]string{"-s", "one"}, `invalid value "one" for flag -s: parse error`},
		{[]string{"--worker-cmd"}, "flag needs an argument: --worker-cmd"},
	} {
		err := fs.Parse(c.args)
		require.Error(t, err, c.args)
		got := FlagError(err)
		assert.Equal(t, c.want, got.Error(), c.args)
		assert.Same(t, err, errors.Unwrap(got), "the flag package's error stays in the chain")
	}
}
