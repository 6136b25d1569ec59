//go:build race

package bench

// raceOn: the race detector makes every write several times slower.
const raceOn = true
