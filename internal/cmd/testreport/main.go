// Command testreport runs `go test -json` (the command after its flags) or
// reads its events on stdin, writes what go test would have printed
// without -json (every package's result line, and the output of the tests
// that failed), and ends with the tests that were skipped. It exits
// non-zero when the run failed (a test or a build failed, or the command
// did) or when a skipped test is not on the allow-list: make test runs
// every test it names (docs/operations.md, "The test suite").
//
//	go run ./internal/cmd/testreport -- go test -json -race ./...
//	go test -json ./pkg | go run ./internal/cmd/testreport
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: testreport [-- go test -json ARGS...]   (without a command: go test -json's events on stdin)")
	}
	flag.Parse()
	os.Exit(run(flag.Args(), os.Stdin, os.Stdout, os.Stderr))
}

// run reports the events of the command args (or of in, with no command)
// to out and returns the exit status.
func run(args []string, in io.Reader, out, errOut io.Writer) int {
	if len(args) == 0 {
		return finish(report(in, out, allowed), nil, out)
	}
	// make test is interrupted by ^C: the go command hears it too (it is
	// in the same process group) and ends; wait for it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stderr = errOut
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(errOut, "testreport:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(errOut, "testreport:", err)
		return 2
	}
	r := report(stdout, out, allowed)
	return finish(r, cmd.Wait(), out)
}

// finish writes the summary of r and returns the exit status: 1 when the
// run failed (cmdErr is how the command ended, nil without one) or a
// skipped test is not allowed.
func finish(r *result, cmdErr error, out io.Writer) int {
	r.summary(out)
	status := 0
	if r.anyFailed || len(r.disallowed()) > 0 {
		status = 1
	}
	if cmdErr != nil {
		if ee, ok := errors.AsType[*exec.ExitError](cmdErr); !ok || ee.ExitCode() <= 0 {
			fmt.Fprintln(out, "testreport: the command:", cmdErr)
		}
		status = 1
	}
	return status
}
