package fleet_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// worker that does not stop its slots, its heartbeat or its leases.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
