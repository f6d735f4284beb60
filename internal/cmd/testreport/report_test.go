package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The recorded events (testdata/*.json) are go test -json's of a package
// example.com/demo: skip.json has TestPass (which logs) and TestSkip;
// fail.json adds TestFail, whose subtest bad fails; buildfail.json is a
// package that does not compile.

func replay(t *testing.T, name string, allow map[string]string) (int, string) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	status := finish(report(f, &out, allow), nil, &out)
	return status, out.String()
}

func contains(t *testing.T, out string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the report lacks %q:\n%s", w, out)
		}
	}
	for _, n := range not {
		if strings.Contains(out, n) {
			t.Errorf("the report has %q:\n%s", n, out)
		}
	}
}

func TestReport(t *testing.T) {
	benchmark := map[string]string{"example.com/demo TestSkip": "a benchmark"}
	for _, c := range []struct {
		name, file string
		allow      map[string]string
		status     int
		want, not  []string
	}{{
		// A skipped test that is not on the allow-list fails the run,
		// named with its reason; the passing test's output is not
		// shown, as go test without -v does not.
		name: "a skip not allowed fails", file: "skip.json", status: 1,
		want: []string{
			"ok  \texample.com/demo\t",
			"tests: 1 passed, 0 failed, 1 skipped",
			"skipped example.com/demo TestSkip (NOT ALLOWED): demo_test.go:7: a benchmark only",
			"1 skipped tests are not on the allow-list",
		},
		not: []string{"quiet when passing", "=== RUN", "PASS\n"},
	}, {
		// A skipped test on the allow-list passes, listed with why it
		// may skip.
		name: "an allowed skip passes", file: "skip.json", allow: benchmark, status: 0,
		want: []string{"skipped example.com/demo TestSkip (allowed: a benchmark)"},
		not:  []string{"not on the allow-list"},
	}, {
		// A failing test fails the run, its skips allowed or not, and
		// its output is shown as go test shows it.
		name: "a failure fails", file: "fail.json", allow: benchmark, status: 1,
		want: []string{
			"    demo_test.go:11: the value was wrong\n--- FAIL: TestFail/bad (",
			"--- FAIL: TestFail (",
			"FAIL\texample.com/demo\t",
			"tests: 2 passed, 2 failed, 1 skipped",
		},
		not: []string{"quiet when passing", "=== RUN", "--- PASS"},
	}, {
		// A package that does not build fails the run, with the
		// compiler's errors.
		name: "a build failure fails", file: "buildfail.json", status: 1,
		want: []string{"broken/b_test.go:5:28: undefined: undefined", "FAIL\texample.com/demo/broken [build failed]"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			status, out := replay(t, c.file, c.allow)
			if status != c.status {
				t.Errorf("status %d, want %d", status, c.status)
			}
			contains(t, out, c.want, c.not)
		})
	}
}

// Running the command itself: its exit status counts even when its events
// say nothing failed, and its skips are held to the allow-list (which
// allows nothing of example.com/demo).
func TestRunCommand(t *testing.T) {
	var out, errOut strings.Builder
	if status := run([]string{"sh", "-c", "echo broken >&2; exit 3"}, nil, &out, &errOut); status != 1 {
		t.Errorf("a command that exits 3: status %d, want 1", status)
	}
	if errOut.String() != "broken\n" {
		t.Errorf("the command's stderr: %q", errOut.String())
	}
	out.Reset()
	if status := run([]string{"cat", filepath.Join("testdata", "skip.json")}, nil, &out, &errOut); status != 1 {
		t.Errorf("a command whose test skipped: status %d, want 1", status)
	}
	contains(t, out.String(), []string{"TestSkip (NOT ALLOWED)"}, nil)
}
