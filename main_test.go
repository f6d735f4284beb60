package toolmux_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// runtime whose Close forgets its hub, its sources or its task log.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
