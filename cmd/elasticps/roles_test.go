package main

import (
	"flag"
	"testing"

	"github.com/elasticps/elasticps/paramstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerFlags(t *testing.T) {
	ss, err := parseServerFlags(nil)
	require.NoError(t, err)
	assert.Equal(t, paramstore.None, ss.cfg.Optimizer, "no flags: the sum store")
	assert.Equal(t, paramstore.Sum, ss.cfg.Aggregate)
	assert.Equal(t, 0, ss.round)

	ss, err = parseServerFlags([]string{"--optimizer", "adam", "--lr", "0.5", "--aggregate", "mean", "--round-size", "-1", "--beta2", "0.99"})
	require.NoError(t, err)
	assert.Equal(t, paramstore.Adam, ss.cfg.Optimizer)
	assert.Equal(t, 0.5, ss.cfg.LR)
	assert.Equal(t, 0.99, ss.cfg.Beta2)
	assert.Equal(t, paramstore.Mean, ss.cfg.Aggregate)
	assert.Equal(t, -1, ss.round)

	for want, args := range map[string][]string{
		`server: --optimizer: unknown optimizer "rmsprop": use one of none, sgd, momentum, adam`: {"--optimizer", "rmsprop"},
		`server: --aggregate: unknown aggregation "avg": use one of sum, mean`:                   {"--aggregate", "avg"},
		`server: paramstore: learning rate -1 for sgd: it must be > 0 (0.01 is a usual start)`:   {"--optimizer", "sgd", "--lr", "-1"},
		`server: --round-size -2: use a number of pushes >= 0, or -1 for the number of workers`:  {"--round-size", "-2"},
		`server: invalid value "x" for flag --lr: parse error (see elasticps server --help)`:     {"--lr", "x"},
		`server: unexpected argument "extra" (flags only; see elasticps server --help)`:          {"extra"},
	} {
		_, err := parseServerFlags(args)
		assert.EqualError(t, err, want)
	}
	_, err = parseServerFlags([]string{"--help"})
	assert.ErrorIs(t, err, flag.ErrHelp)
}
