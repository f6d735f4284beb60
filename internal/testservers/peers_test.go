package testservers_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/internal/testservers"
)

// endings records how a helper ended a test. Unlike a real test's,
// its Fatal and Skip methods return, so every ending a helper reaches is
// recorded (a helper whose first check fails goes on to its next).
type endings struct {
	testing.TB
	fatals, skips []string
}

func (e *endings) Helper() {}

func (e *endings) Fatalf(format string, args ...any) {
	e.fatals = append(e.fatals, fmt.Sprintf(format, args...))
}

func (e *endings) Fatal(args ...any) { e.fatals = append(e.fatals, fmt.Sprint(args...)) }

func (e *endings) Skipf(format string, args ...any) {
	e.skips = append(e.skips, fmt.Sprintf(format, args...))
}

func (e *endings) Skip(args ...any) { e.skips = append(e.skips, fmt.Sprint(args...)) }

// TestMissingFailsUnderRequirePeers checks that with TOOLMUX_REQUIRE_PEERS
// set (as make test sets it) a missing prerequisite fails the test naming
// it, never skips it; without it, it is skipped. Node not on PATH was
// skipped even with TOOLMUX_REQUIRE_PEERS set.
func TestMissingFailsUnderRequirePeers(t *testing.T) {
	for _, require := range []string{"1", ""} {
		t.Run("require="+require, func(t *testing.T) {
			t.Setenv("TOOLMUX_REQUIRE_PEERS", require)
			t.Setenv("PATH", t.TempDir()) // no node on it
			e := &endings{TB: t}
			testservers.NodeBin(e, "mcp-server-everything")
			got, other := e.fatals, e.skips
			if require == "" {
				got, other = e.skips, e.fatals
			}
			if len(other) != 0 {
				t.Errorf("TOOLMUX_REQUIRE_PEERS=%q: ended as %q as well", require, other)
			}
			named := false
			for _, m := range got {
				named = named || strings.Contains(m, "node is not on PATH")
			}
			if !named {
				t.Errorf("TOOLMUX_REQUIRE_PEERS=%q: fatals %q, skips %q; want one naming node", require, e.fatals, e.skips)
			}
		})
	}
}
