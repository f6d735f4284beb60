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
	"syscall"

	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/manager"
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
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// app holds what every command shares.
type app struct {
	configPath string
	verbose    bool
	stdout     io.Writer
	stderr     io.Writer
	stdin      io.Reader
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
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "toolmux:", ee.err)
		}
		return ee.code
	}
	// Anything cobra itself rejects (unknown flag, wrong arity) is usage.
	fmt.Fprintln(stderr, "toolmux:", err)
	return exitUsage
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
	root.AddCommand(a.toolsCommand(), a.callCommand(), a.serveCommand(), a.versionCommand())
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

// openManager loads the configuration and builds the manager.
func (a *app) openManager() (*manager.Manager, *config.Config, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, nil, err
	}
	m, err := manager.FromConfig(cfg, a.logger())
	if err != nil {
		return nil, nil, &exitError{code: exitUsage, err: err}
	}
	return m, cfg, nil
}
