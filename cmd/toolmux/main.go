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

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tasklog"
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
	root.AddCommand(a.toolsCommand(), a.callCommand(), a.serveCommand(), a.runCommand(), a.versionCommand(), a.logsCommand())
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

// runtimeSet is what commands work with: the manager, the governed
// pipeline around it, and the policy engine of the configured mode.
type runtimeSet struct {
	manager  *manager.Manager
	pipeline *pipeline.Pipeline
	policy   *policy.Engine
	config   *config.Config
	// log is the task log every call is recorded in; nil for commands
	// that make no calls, or when there is no data directory.
	log *tasklog.Log
}

func (r *runtimeSet) Close() error {
	err := r.manager.Close()
	if r.log != nil {
		err = errors.Join(err, r.log.Close())
	}
	return err
}

// open loads the configuration and builds the manager (with mopts) and the
// pipeline. With recording, every call through the pipeline is recorded in
// the task log of the data directory.
func (a *app) open(ctx context.Context, recording bool, mopts ...manager.Option) (*runtimeSet, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	log := a.logger()
	cfg.DataDir = a.resolveDataDir(cfg)
	var tl *tasklog.Log
	popts := []pipeline.Option{pipeline.WithDataDir(cfg.DataDir), pipeline.WithLogger(log),
		pipeline.WithLimits(pipeline.Limits{MaxDepth: cfg.Limits.MaxDepth, MaxRecordBytes: int(cfg.Limits.MaxRecordBytes)})}
	if recording && cfg.DataDir != "" && cfg.TaskLog.Enabled {
		if tl, err = tasklog.Open(ctx, cfg.DataDir, taskLogOptions(cfg.TaskLog, log)...); err != nil {
			return nil, &exitError{code: exitFailed, err: fmt.Errorf("task log: %s", taskLogMessage(err))}
		}
		popts = append(popts, pipeline.WithRecorder(tl))
	}
	closeLog := func() {
		if tl != nil {
			tl.Close()
		}
	}
	m, err := manager.FromConfig(cfg, log, mopts...)
	if err != nil {
		closeLog()
		return nil, &exitError{code: exitUsage, err: err}
	}
	p, err := pipeline.New(m, append(pipeline.FromConfig(cfg.Pipeline), popts...)...)
	if err != nil {
		m.Close()
		closeLog()
		return nil, &exitError{code: exitUsage, err: err}
	}
	engine, err := policy.ForConfig(cfg)
	if err == nil && a.approvalMode != "" {
		var mode policy.Mode
		if mode, err = policy.ParseMode(a.approvalMode); err == nil {
			engine, err = engine.WithMode(mode)
		}
		if err != nil {
			err = fmt.Errorf("--approval-mode: %w", err)
		}
	}
	if err != nil {
		m.Close()
		closeLog()
		return nil, &exitError{code: exitUsage, err: err}
	}
	return &runtimeSet{manager: m, pipeline: p, policy: engine, config: cfg, log: tl}, nil
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

// gate returns the policy gate of a command: asking approver for calls
// the policy says to ask about (nil: nobody can be asked, so such calls
// are refused with a message saying how to allow them), and saving
// "always" answers to the configuration file when policy.persist is set.
// gate is the policy gate of a command. concurrent lets approval
// requests wait side by side, for approvers that show many questions at
// once (the gateway's clients and its web page; not a terminal).
func (r *runtimeSet) gate(approver policy.Approver, concurrent bool, log *slog.Logger) *policy.Gate {
	opts := []policy.GateOption{policy.WithApprover(approver), policy.WithConcurrentApprovals(concurrent)}
	if r.config.Policy.Persist && r.config.Path != "" {
		path := r.config.Path
		opts = append(opts,
			policy.WithPersist(func(rule policy.Rule) error { return policy.SaveRule(path, rule) }),
			policy.WithPersistAlways(true),
			policy.WithPersistError(func(rule policy.Rule, err error) {
				log.Warn("could not save the approval to the configuration", "rule", rule.Name, "file", path, "error", err)
			}))
	}
	return policy.NewGate(r.policy, opts...)
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

// durability is the task log's durability as configured: a recorded call
// survives a kill of toolmux by default, and a power cut on request.
func durability(c config.TaskLog) tasklog.Durability {
	if c.Durability == config.DurabilityFull {
		return tasklog.DurabilityFull
	}
	return tasklog.DurabilityProcess
}

// taskLogOptions opens the task log as configured: durability and
// retention.
func taskLogOptions(c config.TaskLog, log *slog.Logger) []tasklog.Option {
	return []tasklog.Option{tasklog.WithLogger(log), tasklog.WithDurability(durability(c)),
		tasklog.WithRetention(tasklog.Retention{MaxAge: c.Retention.MaxAge, MaxBytes: c.Retention.MaxBytes})}
}
