//go:build race

package postoffice_test

// raceScale: the race detector's shadow memory grows the RSS a flood
// may add.
const raceScale = 2
