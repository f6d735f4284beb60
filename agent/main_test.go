package agent_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a run
// that does not wait for its calls, a sub-agent outliving its call, a
// stream not closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
