package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // of build-output and build-fail events
}

// skip is a test that was skipped, and the output it left: the reason.
type skip struct {
	pkg, test, why string
}

// result is what report saw of a run.
type result struct {
	passed, failed int  // tests, subtests counted
	anyFailed      bool // a test, a package or a build failed
	skips          []skip
	allow          map[string]string
}

// key names a test on the allow-list: its package's import path and its
// name, "github.com/toolmux/toolmux/pkg TestName".
func key(pkg, test string) string { return pkg + " " + test }

// report copies the events of r to out as go test prints them without
// -json, and returns what it saw. The output of a test is held until the
// test ends, and written only if it failed; package lines (ok, FAIL, build
// errors) are written as they come. A line that is not an event is
// written as it is.
func report(r io.Reader, out io.Writer, allow map[string]string) *result {
	res := &result{allow: allow}
	held := map[string][]string{} // by key: the output of tests running
	flush := func(k string) {
		for _, l := range held[k] {
			io.WriteString(out, l)
		}
		delete(held, k)
	}
	// flushPackage writes the output of the tests of pkg that never ended:
	// a test binary that panicked or timed out.
	flushPackage := func(pkg string) {
		var ks []string
		for k := range held {
			if strings.HasPrefix(k, pkg+" ") {
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		for _, k := range ks {
			flush(k)
		}
	}
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			var e event
			if jerr := json.Unmarshal([]byte(line), &e); jerr != nil || e.Action == "" {
				io.WriteString(out, line)
			} else {
				res.event(e, out, held, flush, flushPackage)
			}
		}
		if err != nil {
			break
		}
	}
	// The output of tests that never ended, if the stream stopped early.
	for _, pkg := range packagesOf(held) {
		flushPackage(pkg)
	}
	return res
}

func packagesOf(held map[string][]string) []string {
	var pkgs []string
	for k := range held {
		pkg, _, _ := strings.Cut(k, " ")
		if !slices.Contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
	}
	slices.Sort(pkgs)
	return pkgs
}

// framing are the lines go test -json's verbose output has and its plain
// output has not.
func framing(line string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

func (res *result) event(e event, out io.Writer, held map[string][]string, flush func(string), flushPackage func(string)) {
	switch e.Action {
	case "build-output":
		io.WriteString(out, e.Output)
		return
	case "build-fail":
		res.anyFailed = true
		return
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			switch {
			case e.Output == "PASS\n":
				// go test without -v prints a passing package's ok line only.
			case strings.HasPrefix(e.Output, "FAIL"), strings.HasPrefix(e.Output, "panic:"):
				flushPackage(e.Package)
				io.WriteString(out, e.Output)
			default:
				io.WriteString(out, e.Output)
			}
		case "fail":
			flushPackage(e.Package)
			res.anyFailed = true
		}
		return
	}
	k := key(e.Package, e.Test)
	switch e.Action {
	case "output":
		if !framing(e.Output) {
			held[k] = append(held[k], e.Output)
		}
	case "pass":
		res.passed++
		delete(held, k)
	case "fail":
		res.failed++
		res.anyFailed = true
		flush(k)
	case "skip":
		var why []string
		for _, l := range held[k] {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--- SKIP") {
				why = append(why, l)
			}
		}
		res.skips = append(res.skips, skip{e.Package, e.Test, strings.Join(why, " ")})
		delete(held, k)
	}
}

// disallowed are the skips not on the allow-list.
func (res *result) disallowed() []skip {
	var out []skip
	for _, s := range res.skips {
		if _, ok := res.allow[key(s.pkg, s.test)]; !ok {
			out = append(out, s)
		}
	}
	return out
}

// summary writes the count of tests, every skipped test with its reason,
// and what is wrong with the skips.
func (res *result) summary(out io.Writer) {
	fmt.Fprintf(out, "\ntests: %d passed, %d failed, %d skipped\n", res.passed, res.failed, len(res.skips))
	for _, s := range res.skips {
		mark := "NOT ALLOWED"
		if why, ok := res.allow[key(s.pkg, s.test)]; ok {
			mark = "allowed: " + why
		}
		fmt.Fprintf(out, "  skipped %s %s (%s): %s\n", s.pkg, s.test, mark, s.why)
	}
	if bad := res.disallowed(); len(bad) > 0 {
		fmt.Fprintf(out, "%d skipped tests are not on the allow-list of internal/cmd/testreport/allowed.go: make test runs every test"+
			" it names; make each run here, or fail with what it lacks (testservers.Missing)\n", len(bad))
	}
}
