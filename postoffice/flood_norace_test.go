//go:build !race

package postoffice_test

const raceScale = 1
