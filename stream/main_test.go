package stream_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test ends with no goroutine of the hub, a subscription, the
// persister or an SSE handler left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
