package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/vault"
	"github.com/toolmux/toolmux/vault/jsvault"
)

// The vault (docs/vault.md): users' OAuth tokens and secrets for upstream
// servers, encrypted at rest, in the data directory or a fleet's bucket.
// These commands look after it as a whole (its key, its rotation); they
// never show a value.

// vaultFlags name the vault a command works on: the data directory's, or
// a fleet's with --nats.
type vaultFlags struct {
	url, prefix string
}

func (f *vaultFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "nats", "", "the vault of the fleet on this NATS server (its JetStream bucket) instead of the data directory's (default $TOOLMUX_NATS when set)")
	cmd.Flags().StringVar(&f.prefix, "fleet-prefix", "toolmux", "the fleet's name on the NATS server (its bucket is PREFIX_VAULT, in capitals)")
}

// openedVault is a vault and what to say of it.
type openedVault struct {
	*vault.Vault
	// where names the store: a directory, or a bucket and its server.
	where string
	close func()
}

// openVault opens the vault the configuration and f name, with the keys
// the configuration names (none: locked). A key configured that cannot be
// read exits 1, naming where it was looked for.
func (a *app) openVault(ctx context.Context, f vaultFlags) (*openedVault, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	// The keys are read first: one that cannot be read is said before
	// any server is asked anything.
	ring, err := vault.KeysFromConfig(cfg.Vault).Load(os.LookupEnv)
	if err != nil {
		return nil, &exitError{code: exitFailed, err: err}
	}
	opts := vault.OptionsFromConfig(cfg.Vault)
	if f.url == "" {
		f.url = os.Getenv("TOOLMUX_NATS")
	}
	if f.url == "" {
		dir := a.resolveDataDir(cfg)
		if dir == "" {
			return nil, usageError("no data directory to keep the vault in: pass --data-dir or set data_dir in the configuration")
		}
		s := vault.NewFileStore(vault.Dir(dir))
		return &openedVault{Vault: vault.New(s, ring, opts), where: s.Dir(), close: func() {}}, nil
	}
	fl, err := a.connectFleet(ctx, fleetFlags{url: f.url, prefix: f.prefix, lease: 10 * time.Second}, "toolmux vault", fleet.ConnectOptions{})
	if err != nil {
		return nil, err
	}
	s, err := openFleetVault(ctx, fl, opts)
	if err != nil {
		fl.Close()
		return nil, &exitError{code: exitFailed, err: err}
	}
	return &openedVault{Vault: vault.New(s, ring, opts), where: fmt.Sprintf("%s at %s", s, fleet.RedactURL(f.url)),
		close: func() { fl.Close() }}, nil
}

// openFleetVault binds the vault bucket of the fleet fl (PREFIX_VAULT),
// made with the fleet's storage and opts' largest value when it is not
// there yet (by the gateway, in a fleet of members: they may not make
// one). The connection stays fl's.
func openFleetVault(ctx context.Context, fl *fleet.Fleet, opts vault.Options) (*jsvault.Store, error) {
	fo := fl.Options()
	return jsvault.Open(ctx, fl.JetStream(), jsvault.Config{Bucket: fl.VaultBucket(), Replicas: fo.Replicas, Memory: fo.Memory,
		MaxValueBytes: opts.WithDefaults().MaxValueBytes})
}

// withVault is the RunE of a command that works on the vault f names:
// run, with the vault opened, and closed after.
func (a *app) withVault(f *vaultFlags, run func(ctx context.Context, v *openedVault) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		v, err := a.openVault(cmd.Context(), *f)
		if err != nil {
			return err
		}
		defer v.close()
		return run(cmd.Context(), v)
	}
}

func (a *app) vaultCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vault COMMAND",
		Short: "Look after the vault of users' credentials: its key, its rotation, its copy into a fleet",
		Long: `The vault keeps the OAuth tokens and secrets toolmux holds for its users,
to call upstream servers on their behalf, encrypted with AES-256-GCM: in the
data directory's vault/ (one file per user, readable by you only), or, with
--nats, in the fleet's JetStream bucket. Its key is read from the file
vault.key_file names, or the environment variable vault.key_env names
(TOOLMUX_VAULT_KEY by default): never from the configuration. Without a key
the vault is locked, and what needs it says so.

These commands never show a value. See docs/vault.md, which walks through
a rotation of the key.

Exit status: 0 success; 1 a key that cannot be read, a vault that cannot
be read, entries that cannot be opened; 2 usage or configuration error;
130 interrupted.`,
		Example: `  toolmux vault keygen ~/.config/toolmux/vault.key
  toolmux vault status
  toolmux vault rotate
  toolmux vault copy --nats nats://gateway:4222`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.vaultStatusCommand(), a.vaultRotateCommand(), a.vaultKeygenCommand(), a.vaultCopyCommand())
	return cmd
}

func (a *app) vaultKeygenCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen [FILE]",
		Short: "Make a new vault key",
		Long: `Make a new random vault key (32 bytes, in base64). With FILE, write it
there, readable by you only (mode 0600), refusing a file that exists (a key
written over is every value it sealed lost), and print its id; name the
file in vault.key_file. Without FILE, print the key on stdout, for an
environment variable (TOOLMUX_VAULT_KEY, or the one vault.key_env names)
or a secret manager: keep it out of shell history and logs.`,
		Example: `  toolmux vault keygen /etc/toolmux/vault.key
  export TOOLMUX_VAULT_KEY=$(toolmux vault keygen)`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				text := vault.GenerateKey()
				k, _ := vault.ParseKey(text)
				fmt.Fprintln(a.stdout, text)
				fmt.Fprintf(a.stderr, "toolmux: vault key %s made; it is shown only now: keep it\n", k.ID())
				return nil
			}
			id, err := vault.WriteKeyFile(args[0])
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			fmt.Fprintf(a.stderr, "toolmux: vault key %s written to %s (mode 0600); name it in vault.key_file\n", id, args[0])
			return nil
		},
	}
}

func (a *app) vaultStatusCommand() *cobra.Command {
	var (
		f      vaultFlags
		asJSON bool
		check  bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Say whether the vault is locked, its keys, and its entries counted by key",
		Long: `Say where the vault is, whether it is locked (no key configured), the ids
of its current and previous keys and where they are read, and how many
owners and entries it holds, counted by the key that sealed them: entries
of a previous key are what toolmux vault rotate re-seals; entries of a key
not configured cannot be opened. Nothing is opened, and no value is shown.

--check opens every entry with the keys configured, and exits 1 naming
those that do not open. --json prints one JSON object.`,
		Args: cobra.NoArgs,
		RunE: a.withVault(&f, func(ctx context.Context, v *openedVault) error {
			st, err := v.Status(ctx)
			if err != nil {
				return vaultError(err)
			}
			var failed []error
			checked := 0
			if check {
				if checked, failed, err = v.Check(ctx); err != nil {
					return vaultError(err)
				}
			}
			if asJSON {
				out := struct {
					Store string `json:"store"`
					vault.Status
					Checked *int     `json:"checked,omitempty"`
					Failed  []string `json:"failed,omitempty"`
				}{Store: v.where, Status: st}
				if check {
					out.Checked = &checked
					for _, e := range failed {
						out.Failed = append(out.Failed, e.Error())
					}
				}
				if err := writeJSON(a, out); err != nil {
					return err
				}
			} else {
				a.printVaultStatus(v, st)
				if check {
					fmt.Fprintf(a.stdout, "checked: %s opened of %d\n", pluralEntries(checked-len(failed)), checked)
				}
			}
			return failedEntries(a, "entry does not open", "entries do not open", failed)
		}),
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (for scripts)")
	cmd.Flags().BoolVar(&check, "check", false, "open every entry, and exit 1 naming those that do not open")
	return cmd
}

func (a *app) printVaultStatus(v *openedVault, st vault.Status) {
	fmt.Fprintf(a.stdout, "vault: %s\n", v.where)
	ring := v.Keyring()
	if ring == nil {
		fmt.Fprintf(a.stdout, "key: none: the vault is locked (configure vault.key_file or vault.key_env, or set %s; toolmux vault keygen makes a key)\n", vault.DefaultKeyEnv)
	} else {
		k := ring.CurrentKey()
		fmt.Fprintf(a.stdout, "key: %s (%s)\n", k.ID(), k.Source())
		for _, p := range ring.PreviousKeys() {
			fmt.Fprintf(a.stdout, "previous key: %s (%s)\n", p.ID(), p.Source())
		}
	}
	fmt.Fprintf(a.stdout, "%s, %s\n", plural(st.Owners, "owner"), pluralEntries(st.Entries))
	if len(st.ByKey) == 0 {
		return
	}
	ids := make([]string, 0, len(st.ByKey))
	for id := range st.ByKey {
		ids = append(ids, id)
	}
	// The current key first, then the previous ones, then the rest.
	rank := func(id string) int {
		switch {
		case st.CurrentKey != "" && id == st.CurrentKey:
			return 0
		case slices.Contains(st.PreviousKeys, id):
			return 1
		}
		return 2
	}
	slices.SortFunc(ids, func(x, y string) int {
		if d := rank(x) - rank(y); d != 0 {
			return d
		}
		return strings.Compare(x, y)
	})
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	if st.Locked {
		// Without keys, nothing to say of them but their entries.
		fmt.Fprintln(tw, "KEY\tENTRIES")
		for _, id := range ids {
			fmt.Fprintf(tw, "%s\t%d\n", orDash(id), st.ByKey[id])
		}
		tw.Flush()
		return
	}
	fmt.Fprintln(tw, "KEY\tENTRIES\tSTATE")
	for _, id := range ids {
		var what string
		switch {
		case id == "":
			what = "not sealed values: they cannot be opened"
		case rank(id) == 0:
			what = "current key"
		case rank(id) == 1:
			what = "previous key: toolmux vault rotate re-seals them with the current one"
		default:
			what = "a key not configured: they cannot be opened"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", orDash(id), st.ByKey[id], what)
	}
	tw.Flush()
}

func pluralEntries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

func (a *app) vaultRotateCommand() *cobra.Command {
	var f vaultFlags
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "Re-seal every entry with the current key",
		Long: `Re-seal with the current key (vault.key_file or vault.key_env) every entry
sealed with a previous one (vault.previous_key_files, vault.previous_key_envs).
Each entry is re-sealed on its own, atomically: a rotation cut short (Ctrl-C,
a kill, a crash) leaves every entry readable with the keys configured, and
running it again finishes it. A running toolmux serve (or a fleet's workers)
may go on using the vault meanwhile, with both keys configured.

An entry no key configured opens is left as it is, named, and makes the exit
status 1. When every entry is sealed with the current key, the previous keys
may be taken out of the configuration. docs/vault.md walks through it.`,
		Args: cobra.NoArgs,
		RunE: a.withVault(&f, func(ctx context.Context, v *openedVault) error {
			if v.Locked() {
				return &exitError{code: exitFailed, err: errors.New("the vault is locked: configure its current key (vault.key_file or vault.key_env) and the previous ones to re-seal with it; see docs/vault.md")}
			}
			ring := v.Keyring()
			prev := "no previous key configured"
			if ids := ring.Previous(); len(ids) > 0 {
				prev = "previous " + strings.Join(ids, ", ")
			}
			fmt.Fprintf(a.stderr, "toolmux: vault %s: re-sealing with key %s (%s)\n", v.where, ring.Current(), prev)
			rep, err := v.Rotate(ctx, func(owner string, resealed, _ int) {
				if resealed > 0 {
					fmt.Fprintf(a.stderr, "toolmux: %s: %s re-sealed\n", owner, pluralEntries(resealed))
				}
			})
			if err != nil {
				if ctx.Err() != nil {
					return &exitError{code: exitInterrupted, err: fmt.Errorf("rotation interrupted after %s re-sealed: every entry is readable "+
						"with the keys configured; run toolmux vault rotate again to finish it", pluralEntries(rep.Resealed))}
				}
				return vaultError(fmt.Errorf("rotation stopped after %s re-sealed (every entry is readable with the keys configured; "+
					"run it again once this is put right): %w", pluralEntries(rep.Resealed), err))
			}
			fmt.Fprintf(a.stderr, "toolmux: rotation done: %s re-sealed, %s already sealed with key %s, of %s\n",
				pluralEntries(rep.Resealed), pluralEntries(rep.Current), ring.Current(), plural(rep.Owners, "owner"))
			if len(rep.Failed) == 0 && len(ring.Previous()) > 0 {
				fmt.Fprintf(a.stderr, "toolmux: every entry is sealed with key %s: the previous keys may be taken out of the configuration\n", ring.Current())
			}
			return failedEntries(a, "entry was left as it was", "entries were left as they were", rep.Failed)
		}),
	}
	f.add(cmd)
	return cmd
}

func (a *app) vaultCopyCommand() *cobra.Command {
	var f vaultFlags
	cmd := &cobra.Command{
		Use:   "copy --nats URL",
		Short: "Copy the data directory's vault into the fleet's bucket",
		Long: `Copy every entry of the data directory's vault (DATA_DIR/vault/) into the
fleet's vault bucket, for a gateway that joins a fleet: in a fleet, serve
keeps its users' secrets and OAuth tokens in the bucket, and no longer reads
the data directory's. Each entry is copied as it is, sealed: nothing is
opened, no key is needed, and it opens in the bucket with the key that
sealed it (give the fleet's machines that key). An entry the bucket holds
already is kept: it is the one in use. The data directory's vault is left
as it is. Run again, it copies what is left.`,
		Example: `  toolmux vault copy --nats nats://gateway:4222`,
		Args:    cobra.NoArgs,
		RunE: a.withVault(&f, func(ctx context.Context, v *openedVault) error {
			if f.url == "" && os.Getenv("TOOLMUX_NATS") == "" {
				return usageError("name the fleet whose bucket to copy into: --nats URL (or TOOLMUX_NATS)")
			}
			cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			dir := a.resolveDataDir(cfg)
			if dir == "" {
				return usageError("no data directory to copy the vault of: pass --data-dir or set data_dir in the configuration")
			}
			from := vault.NewFileStore(vault.Dir(dir))
			rep, err := v.Copy(ctx, from)
			if err != nil {
				return vaultError(fmt.Errorf("copy stopped after %s copied (run it again once this is put right): %w", pluralEntries(rep.Copied), err))
			}
			fmt.Fprintf(a.stderr, "toolmux: %s of %s copied from %s to %s; %s kept (the bucket had them already)\n",
				pluralEntries(rep.Copied), plural(rep.Owners, "owner"), from.Dir(), v.where, pluralEntries(rep.Kept))
			return nil
		}),
	}
	f.add(cmd)
	return cmd
}

// failedEntries says which entries could not be opened, one a line on
// stderr, and makes the exit status 1; nil when there are none.
func failedEntries(a *app, one, many string, failed []error) error {
	if len(failed) == 0 {
		return nil
	}
	for _, e := range failed {
		fmt.Fprintf(a.stderr, "toolmux: %v\n", e)
	}
	what := many
	if len(failed) == 1 {
		what = one
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("%d %s: configure the key that sealed them as a previous key, or delete them", len(failed), what)}
}

// vaultError is the exit of a vault command whose vault refused: 1.
func vaultError(err error) error {
	return &exitError{code: exitFailed, err: err}
}
