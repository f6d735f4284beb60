package main

// allowed are the tests that may be skipped in make test, each with why,
// by key: "IMPORT/PATH TestName" (a subtest: "IMPORT/PATH TestName/sub").
// Only tests that are benchmarks and nothing else belong here, and none
// does: the fleet's long runs are the suite's TestFleetRecovery and
// TestFleetSoak at a larger size (TOOLMUX_FLEET_RECOVERY=1,
// TOOLMUX_FLEET_SOAK=1), not skipped tests. docs/operations.md, "The test
// suite", lists this list.
var allowed = map[string]string{}
