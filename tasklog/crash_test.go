package tasklog_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// crashDirEnv makes the test binary run crashWriter instead of the tests.
const crashDirEnv = "TASKLOG_CRASH_DIR"

// crashWriter is the process the crash test kills: it records calls and
// steps in a loop and prints each one's id on stdout once the write has
// returned, so every id printed is one the log promised to keep.
func crashWriter(dir string) int {
	ctx := context.Background()
	var opts []tasklog.Option
	if os.Getenv("TASKLOG_CRASH_DURABILITY") == "process" {
		opts = append(opts, tasklog.WithDurability(tasklog.DurabilityProcess))
	}
	l, err := tasklog.Open(ctx, dir, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := l.StartTask(ctx, tasklog.Task{ID: "crash", Input: "write until killed"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 0; ; i++ {
		start := time.Now()
		rec := &tool.Record{ID: tool.NewID(), Task: "crash", Session: "main", Server: "fx", Tool: "echo",
			Arguments: map[string]any{"i": float64(i), "pad": strings.Repeat("x", 500)},
			Result:    &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: fmt.Sprint(i)}}},
			Started:   start, Ended: time.Now(), Attempts: 1}
		l.Record(ctx, rec)
		if l.Stats().Lost > 0 {
			fmt.Fprintln(os.Stderr, "lost a record:", l.Stats().LastError)
			return 1
		}
		// One write(2) per line: nothing sits in a user-space buffer when
		// the process is killed.
		fmt.Fprintf(os.Stdout, "r %s\n", rec.ID)
		name := fmt.Sprintf("step-%d", i)
		if err := l.Step(ctx, "crash", tasklog.Step{Name: name}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(os.Stdout, "s %s\n", name)
	}
}

// A process killed with SIGKILL in the middle of writing loses nothing it
// was told was written, and leaves a sound database.
func TestCrashKeepsEveryAcknowledgedWrite(t *testing.T) {
	for _, tc := range []struct {
		durability string
		after      int
	}{{"full", 150}, {"process", 400}, {"full", 37}} {
		t.Run(fmt.Sprintf("%s/%d", tc.durability, tc.after), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, "TASKLOG_CRASH_DURABILITY="+tc.durability)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var records, steps []string
			sc := bufio.NewScanner(out)
			for len(records) < tc.after && sc.Scan() {
				kind, id, _ := strings.Cut(sc.Text(), " ")
				if kind == "r" {
					records = append(records, id)
				} else {
					steps = append(steps, id)
				}
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			// Whatever was printed before the kill landed is acknowledged too.
			for sc.Scan() {
				kind, id, _ := strings.Cut(sc.Text(), " ")
				if kind == "r" {
					records = append(records, id)
				} else {
					steps = append(steps, id)
				}
			}
			err = cmd.Wait()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the writer was not killed: %v", err)
			}
			if len(records) < tc.after {
				t.Fatalf("the writer printed %d ids, want %d", len(records), tc.after)
			}

			var check string
			if err := indexDB(t, dir).QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
				t.Fatalf("integrity_check: %q %v", check, err)
			}
			l := open(t, dir)
			ctx := context.Background()
			calls, err := l.Calls(ctx, "crash")
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, c := range calls {
				have[c.ID] = true
			}
			for _, id := range records {
				if !have[id] {
					t.Errorf("acknowledged record %s is missing", id)
				}
			}
			got, err := l.Steps(ctx, "crash")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) < len(steps) {
				t.Errorf("%d steps stored, %d acknowledged", len(got), len(steps))
			}
			for i, s := range steps {
				if i < len(got) && got[i].Name != s {
					t.Errorf("step %d is %q, want %q", i, got[i].Name, s)
				}
			}
			// Open saw that the process running the task is gone.
			task, err := l.Task(ctx, "crash")
			if err != nil || task.Status != tasklog.StatusInterrupted {
				t.Fatalf("task %+v, %v", task, err)
			}
			if last := got[len(got)-1]; last.Name != "interrupted" || !strings.Contains(last.Message, fmt.Sprintf("pid %d", cmd.Process.Pid)) {
				t.Fatalf("the last step is %+v, want the interruption naming pid %d", last, cmd.Process.Pid)
			}
			t.Logf("%d records and %d steps acknowledged before SIGKILL, %d records stored", len(records), len(steps), len(calls))
		})
	}
}
