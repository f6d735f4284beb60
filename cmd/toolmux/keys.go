package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tool"
)

// API keys (docs/identity.md): named secrets with groups, for
// callers without an identity provider, kept hashed in the data
// directory's keys.json. `toolmux keys` writes the store; serve verifies
// with it, following the file while it runs.

// keysPath is where the data directory keeps the API keys.
func keysPath(dataDir string) string { return filepath.Join(dataDir, "keys.json") }

// keysFile is the API key store of cfg: auth.keys when it names one,
// else keys.json in the data directory ("" when there is none).
func (a *app) keysFile(cfg *config.Config) string {
	if cfg.Auth.Keys != "" {
		return cfg.Auth.Keys
	}
	if dir := a.resolveDataDir(cfg); dir != "" {
		return keysPath(dir)
	}
	return ""
}

func (a *app) keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys COMMAND",
		Short: "Add, list and revoke the gateway's API keys",
		Long: `API keys let callers without an identity provider (scripts, CI, agents)
call toolmux serve as themselves: a key has a name, which is its caller's
name in every decision and record, and groups. The keys are kept in the
data directory's keys.json (readable and writable by you only) as the
SHA-256 of their secrets: a key is printed once, when it is made, and
never again.

A toolmux serve with keys requires one (or its --token) on every route,
and may listen beyond loopback without --token. A running serve sees keys
added, replaced and revoked within a second, without a restart.
See docs/identity.md.

Exit status: 0 success; 1 no key of that name, a key of that name
already, or a key store that cannot be used (its file named); 2 usage or
configuration error.`,
		Example: `  toolmux keys add ci --group dev
  toolmux keys list
  toolmux keys revoke ci`,
		// Runnable, so that a command that is none ("toolmux keys ad") is
		// a usage error rather than this help.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.keysAddCommand(), a.keysListCommand(), a.keysRevokeCommand())
	return cmd
}

func (a *app) keysAddCommand() *cobra.Command {
	var (
		groups  []string
		replace bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Make an API key and print it, once",
		Long: `Make an API key named NAME (1 to 64 letters, digits, '-', '_', '.') in
the groups of --group (the same characters, and ':', '/', '@'), and print
it on stdout, alone on its line: it is shown only now, the store keeps its
hash. Clients send it as "Authorization: Bearer KEY".

A key of that name already is refused (exit 1) unless --replace, which
makes a new key in its place: the old one stops working.`,
		Example: `  toolmux keys add ci --group dev
  KEY=$(toolmux keys add nightly --group dev --group reports)
  claude mcp add --transport http toolmux http://127.0.0.1:8931/mcp --header "Authorization: Bearer $KEY"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := identity.CheckKeyName(name); err != nil {
				return usageError("%v", err)
			}
			for _, g := range groups {
				if err := identity.CheckGroupName(g); err != nil {
					return usageError("--group: %v", err)
				}
			}
			store, err := a.keyStore()
			if err != nil {
				return err
			}
			secret, replaced, err := store.Add(name, groups, replace)
			if err != nil {
				return keysError(err)
			}
			fmt.Fprintln(a.stdout, secret)
			what := "added"
			if replaced {
				what = "replaced (the old key no longer works)"
			}
			fmt.Fprintf(a.stderr, "toolmux: API key %s (%s) %s in %s; it is shown only now: keep it\n",
				name, groupsOf(groups), what, store.Path())
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&groups, "group", nil, "a group of the key's caller (repeatable, or comma-separated)")
	cmd.Flags().BoolVar(&replace, "replace", false, "replace the key of that name, if there is one, by a new one")
	return cmd
}

func (a *app) keysListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the API keys: name, groups, when made",
		Long: `List the API keys of the data directory by name: their groups and when
they were made. Neither a key nor its hash is ever shown. --json prints
one JSON array of {"name", "groups", "created"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.keyStore()
			if err != nil {
				return err
			}
			keys, err := store.List()
			if err != nil {
				return keysError(err)
			}
			if asJSON {
				type listed struct {
					Name    string    `json:"name"`
					Groups  []string  `json:"groups"`
					Created time.Time `json:"created"`
				}
				out := make([]listed, len(keys))
				for i, k := range keys {
					out[i] = listed{Name: k.Name, Groups: k.Groups, Created: k.Created}
					if out[i].Groups == nil {
						out[i].Groups = []string{}
					}
				}
				return writeJSON(a, out)
			}
			if len(keys) == 0 {
				fmt.Fprintln(a.stdout, "no API keys (toolmux keys add NAME makes one)")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tGROUPS\tCREATED")
			for _, k := range keys {
				created := "-"
				if !k.Created.IsZero() {
					created = k.Created.Local().Format(timeLayout)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", k.Name, orDash(strings.Join(k.Groups, ",")), created)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array (for scripts)")
	return cmd
}

func (a *app) keysRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Remove an API key: it stops working",
		Long: `Remove the API key named NAME from the store. It stops working at once for
new processes, and within a second for a running toolmux serve, without a
restart. A name that is no key exits 1, with the nearest one.`,
		Example: `  toolmux keys revoke ci`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := a.keyStore()
			if err != nil {
				return err
			}
			if err := store.Revoke(args[0]); err != nil {
				return keysError(err)
			}
			fmt.Fprintf(a.stderr, "toolmux: API key %s revoked; a running toolmux serve refuses it within %s\n", args[0], identity.DefaultKeyRecheck)
			return nil
		},
	}
}

// keyStore is the API key store of the data directory.
func (a *app) keyStore() (*identity.KeyStore, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	path := a.keysFile(cfg)
	if path == "" {
		return nil, usageError("no data directory to keep API keys in: pass --data-dir or set data_dir (or auth.keys) in the configuration")
	}
	return identity.NewKeyStore(path), nil
}

// keysError is the exit of a keys command whose store refused: 1, in the
// words of the command line.
func keysError(err error) error {
	if nf, ok := errors.AsType[*identity.KeyNotFoundError](err); ok {
		msg := nf.Error()
		if sug := tool.Closest(nf.Name, nf.Names); sug != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", sug)
		}
		return &exitError{code: exitFailed, err: errors.New(msg + "; toolmux keys list lists them")}
	}
	if ex, ok := errors.AsType[*identity.KeyExistsError](err); ok {
		msg := ex.Error()
		if !ex.Created.IsZero() {
			msg += " (made " + ex.Created.Local().Format(timeLayout) + ")"
		}
		return &exitError{code: exitFailed, err: errors.New(msg + ": revoke it first, or add --replace to make a new key in its place")}
	}
	if _, ok := errors.AsType[*identity.KeyNameError](err); ok {
		return usageError("%v", err)
	}
	return &exitError{code: exitFailed, err: err}
}

func groupsOf(groups []string) string {
	if len(groups) == 0 {
		return "no groups"
	}
	return "groups " + strings.Join(groups, ", ")
}

// apiKeys returns the API keys of the data directory for serve, followed
// while it runs (a key added or revoked by toolmux keys is seen within
// identity.DefaultKeyRecheck); nil when there is no data directory. A
// store that cannot be used stops serve at its start (exit 1), naming its
// file; later, it is said on stderr, and every key refused until it is
// put right.
func (a *app) apiKeys() (*identity.StoreKeys, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	path := a.keysFile(cfg)
	if path == "" {
		return nil, nil
	}
	keys, err := identity.NewKeyStore(path).Follow(identity.FollowOptions{OnChange: func(n int, err error) {
		if err != nil {
			fmt.Fprintf(a.stderr, "toolmux: every API key is refused until its store is put right: %v\n", err)
			return
		}
		fmt.Fprintf(a.stderr, "toolmux: API keys changed: %s in %s\n", plural(n, "key"), path)
	}})
	if err != nil {
		return nil, &exitError{code: exitFailed, err: err}
	}
	return keys, nil
}

// hasKeys says whether keys (nil: no store) has a key now.
func hasKeys(keys *identity.StoreKeys) bool { return keys != nil && keys.Len() > 0 }

// gatewayAuth is who may call serve over HTTP: the holder of token (the
// caller "default", in group admin, as gateway.TokenAuth has it) and the
// holders of the API keys of the store (nil: none). Started with neither a
// token nor a key (on loopback), serve asks for no credential until the
// first key is added; from then on it asks for one on every request
// until it stops, even should every key be revoked again.
func (a *app) gatewayAuth(keys *identity.StoreKeys, token, adminGroup string) gateway.Auth {
	if keys == nil {
		return gateway.TokenAuthIn(token, adminGroup)
	}
	var vs identity.Verifiers
	if token != "" {
		// The token first: it is compared in constant time, and may have
		// any form, the key prefix included.
		vs = append(vs, gateway.TokenVerifierIn(token, adminGroup))
	}
	auth := gateway.Auth{Verifier: append(vs, keys)}
	n := keys.Len()
	switch {
	case n == 0 && token == "":
		l := &keysLatch{keys: keys, say: func() {
			fmt.Fprintf(a.stderr, "toolmux: API keys added to %s: every request must carry one from now on\n", keys.Path())
		}}
		auth.Required = l.required
	case n > 0:
		also := ""
		if token != "" {
			also = " (or the token)"
		}
		fmt.Fprintf(a.stderr, "toolmux: %s in %s: every request must carry one%s\n", plural(n, "API key"), keys.Path(), also)
	}
	if token != "" {
		if stored, err := identity.NewKeyStore(keys.Path()).List(); err == nil &&
			slices.ContainsFunc(stored, func(k identity.StoredKey) bool { return k.Name == "default" }) {
			fmt.Fprintf(a.stderr, "toolmux: warning: the API key named default and --token are one caller, default "+
				"(in group %s with the token, in the key's groups with the key)\n", gateway.AdminGroup)
		}
	}
	return auth
}

// keysLatch turns authentication on when the store first has a key (or
// a file that cannot be used, which was meant to hold keys), and keeps it
// on.
type keysLatch struct {
	keys *identity.StoreKeys
	on   atomic.Bool
	say  func()
}

func (l *keysLatch) required() bool {
	if l.on.Load() {
		return true
	}
	if l.keys.Len() == 0 && l.keys.Err() == nil {
		return false
	}
	if l.on.CompareAndSwap(false, true) {
		l.say()
	}
	return true
}
