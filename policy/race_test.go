//go:build race

package policy_test

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts of code that pools (regexp does) mean nothing.
const raceEnabled = true
