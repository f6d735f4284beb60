// Command toolmux discovers, governs and calls the tools AI agents use: MCP
// servers over stdio, SSE and streamable HTTP, and its own built-in tools.
//
// Exit codes: 0 success; 1 the tool reported an error or the call failed;
// 2 usage or configuration error; 3 internal failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/stream"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitInternal = 3
)

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	err  error
	// usage marks a command line that is wrong: the command's usage line
	// and a --help hint follow the message.
	usage bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is a mistake in the command line (exit 2), shown with the
// command's usage line.
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, usage: true, err: fmt.Errorf(format, args...)}
}

// app holds what every command shares.
type app struct {
	configPath   string
	dataDir      string
	approvalMode string
	yes          bool
	verbose      bool
	stdout       io.Writer
	stderr       io.Writer
	stdin        io.Reader
	// logsFleet names the fleet whose task log the logs commands read.
	logsFleet fleetFlags
	// cleanups run when the command has ended (the fleet connection of
	// a logs command), last first.
	cleanups []func()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "toolmux: internal error: %v\n", p)
			code = exitInternal
		}
	}()
	a := &app{stdout: stdout, stderr: stderr, stdin: stdin}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	for i := len(a.cleanups) - 1; i >= 0; i-- {
		a.cleanups[i]()
	}
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "toolmux:", ee.err)
		}
		if ee.usage {
			printUsageHint(stderr, cmd)
		}
		return ee.code
	}
	// Anything cobra itself rejects (unknown flag or command, wrong
	// arity) is usage.
	fmt.Fprintln(stderr, "toolmux:", err)
	printUsageHint(stderr, cmd)
	return exitUsage
}

// printUsageHint ends a usage error: the command's usage line and where
// to read more.
func printUsageHint(w io.Writer, cmd *cobra.Command) {
	if cmd == nil {
		return
	}
	line := cmd.UseLine()
	if !cmd.Runnable() && cmd.HasAvailableSubCommands() {
		line = cmd.CommandPath() + " COMMAND [flags]"
	}
	fmt.Fprintf(w, "Usage: %s\nRun '%s --help' for more.\n", line, cmd.CommandPath())
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "toolmux",
		Short: "Discover, govern and call the tools AI agents use",
		Long: `toolmux sits between an AI agent and its tools. It aggregates MCP servers
(stdio, SSE, streamable HTTP) and built-in tools into one catalog, and governs
every call: allow/deny lists, timeouts, retries, circuit breakers.

Configuration comes from --config FILE, else ./toolmux.yaml, else the built-in
tools on the current directory. The common {"mcpServers": {...}} JSON of
Claude Desktop, Cursor and Gemini CLI is accepted as is.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVarP(&a.configPath, "config", "c", "", "configuration file (toolmux.yaml or mcpServers JSON)")
	root.PersistentFlags().BoolVarP(&a.verbose, "verbose", "v", false, "log diagnostics to stderr")
	root.PersistentFlags().StringVar(&a.approvalMode, "approval-mode", "", "approval mode: plan, default, auto_edit or yolo (default: policy.mode from the config, else default)")
	root.PersistentFlags().BoolVarP(&a.yes, "yes", "y", false, "approve every call the policy would ask about (deny rules still apply)")
	root.PersistentFlags().StringVar(&a.dataDir, "data-dir", "", "where toolmux keeps state (default: data_dir from the config, else $XDG_DATA_HOME/toolmux or ~/.local/share/toolmux)")
	root.AddCommand(a.toolsCommand(), a.callCommand(), a.serveCommand(), a.runCommand(), a.versionCommand(), a.logsCommand(),
		a.workerCommand(), a.submitCommand(), a.runsCommand(), a.keysCommand(), a.vaultCommand(), a.secretsCommand(), a.fleetCommand())
	return root
}

// loadConfig finds and loads the configuration; errors are usage errors.
func (a *app) loadConfig() (*config.Config, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, &exitError{code: exitInternal, err: err}
	}
	path, err := config.Find(a.configPath, wd)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	if path == "" {
		return config.Default(), nil
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("invalid configuration:\n%w", err)}
	}
	return cfg, nil
}

func (a *app) logger() *slog.Logger {
	if !a.verbose {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// open loads the configuration and assembles its runtime with
// toolmux.Open, adjusted by o; the command-line flags decide the data
// directory, the approval mode and the logger. A task log that cannot be
// opened is a failure (exit 1); anything else wrong in the configuration
// is a usage error.
func (a *app) open(ctx context.Context, o toolmux.Options) (*toolmux.Runtime, error) {
	return a.openIn(ctx, o, "")
}

// openIn is open with the runtime's state in sub, a directory under the
// data directory ("" for the data directory itself): a fleet's gateway
// keeps its index of the fleet's journal apart from the local task log.
func (a *app) openIn(ctx context.Context, o toolmux.Options, sub string) (*toolmux.Runtime, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	cfg.DataDir = a.resolveDataDir(cfg)
	if sub != "" && cfg.DataDir != "" {
		cfg.DataDir = filepath.Join(cfg.DataDir, sub)
	}
	if a.approvalMode != "" {
		if o.Mode, err = policy.ParseMode(a.approvalMode); err != nil {
			return nil, &exitError{code: exitUsage, err: fmt.Errorf("--approval-mode: %w", err)}
		}
	}
	o.Logger = a.logger()
	o.Getenv = os.Getenv
	rt, err := toolmux.Open(ctx, cfg, o)
	if tle, ok := errors.AsType[*toolmux.TaskLogError](err); ok {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("task log: %s", taskLogMessage(tle.Err))}
	}
	if _, ok := errors.AsType[*stream.StoreError](err); ok {
		// The event hub could not read the task log.
		return nil, &exitError{code: exitFailed, err: err}
	}
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	return rt, nil
}

// closeRuntime closes a command's runtime, even after the command's
// context has ended, within shutdownGrace.
func closeRuntime(ctx context.Context, rt *toolmux.Runtime) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	_ = rt.Close(cctx)
}

// approver returns who approves calls the policy asks about: everything
// with --yes; the user, on a terminal, when stdin is free to read answers
// from; else nobody, and such calls are refused with a message saying how
// to allow them.
func (a *app) approver(stdinFree bool) policy.Approver {
	if a.yes {
		return policy.ApproverFunc(func(context.Context, policy.Request) (policy.Answer, error) {
			return policy.ProceedOnce, nil
		})
	}
	if f, ok := a.stdin.(*os.File); ok && stdinFree && term.IsTerminal(int(f.Fd())) {
		return policy.NewTerminal(f, a.stderr)
	}
	return nil
}

// resolveDataDir picks the data directory: the flag, the configuration,
// $XDG_DATA_HOME/toolmux, ~/.local/share/toolmux, or none.
func (a *app) resolveDataDir(cfg *config.Config) string {
	switch {
	case a.dataDir != "":
		return a.dataDir
	case cfg.DataDir != "":
		return cfg.DataDir
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "toolmux")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "toolmux")
	}
	return ""
}
