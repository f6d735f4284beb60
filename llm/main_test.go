package llm_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// provider that forgets to close a stream or a timer leaks one per request.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
