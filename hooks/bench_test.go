package hooks_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/toolmux/toolmux/hooks"
	"github.com/toolmux/toolmux/policy"
)

// cpuTime is the CPU time (user and system) of this process and of its
// reaped children so far, in microseconds.
func cpuTime(b *testing.B) int64 {
	var self, children syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children); err != nil {
		b.Fatal(err)
	}
	us := func(t syscall.Timeval) int64 { return int64(t.Sec)*1e6 + int64(t.Usec) }
	return us(self.Utime) + us(self.Stime) + us(children.Utime) + us(children.Stime)
}

// The cost of one trivial PreToolUse hook per call (BENCHMARKS.md): the
// gate with the hook against the gate alone, in wall time and in CPU time
// of toolmux and the hook's processes together.
func BenchmarkPreToolUseHook(b *testing.B) {
	for _, bc := range []struct {
		name string
		cmds []hooks.Command
	}{
		{"none", nil},
		{"exit0", []hooks.Command{{Command: "exit 0"}}},
		{"cat", []hooks.Command{{Command: "cat >/dev/null"}}},
		{"block-rm.sh", []hooks.Command{{Command: script(b, "block-rm.sh")}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var ms []hooks.Matcher
			if bc.cmds != nil {
				ms = []hooks.Matcher{{Matcher: "*", Hooks: bc.cmds}}
			}
			h, err := hooks.New(hooks.Options{PreToolUse: ms})
			if err != nil {
				b.Fatal(err)
			}
			e, _ := policy.New(policy.ModeYolo, nil)
			g := h.Gate(policy.NewGate(e))
			ctx := context.Background()
			start := cpuTime(b)
			b.ResetTimer()
			for b.Loop() {
				if _, _, err := g.AdmitArguments(ctx, shellTool, shellCall("ls"), nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-µs/op")
		})
	}
}
