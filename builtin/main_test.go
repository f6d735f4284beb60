package builtin_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind: shell's
// pipe readers and process waiter must all end before Call returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
