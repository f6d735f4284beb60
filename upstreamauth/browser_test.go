package upstreamauth_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/upstreamauth"
)

const chromium = "/usr/bin/chromium"

// browser starts a headless Chromium with a fresh profile, or skips the
// test when it is not installed (fails it with TOOLMUX_REQUIRE_PEERS:
// testservers.Missing).
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		testservers.Missing(t, "Chromium is not installed at %s (apt-get install chromium): %v", chromium, err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium),
		chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()))
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// TestTwoUsersEachThemselves: two callers of one gateway, nothing
// configured for either, each authorizes in a browser and reaches the
// upstream as themselves; the gateway registered itself once (dynamic
// registration), and a gateway started again on the same vault does not
// register again.
func TestTwoUsersEachThemselves(t *testing.T) {
	r := newRig(t)
	b := browser(t)
	c := r.client(t, upstreamauth.Options{}, nil, upstreamauth.Upstream{Name: "fx", URL: r.fx.URL})
	ctx := t.Context()
	for _, user := range []string{"ann", "bob"} {
		owner := "key:" + user
		_, err := whoami(ctx, c, owner, "fx", r.fx.URL)
		u := authURL(t, err)
		bctx, cancel := context.WithTimeout(b, time.Minute)
		err = chromedp.Do(bctx, chromedp.Navigate(u),
			chromedp.SendKeys(chromedp.CSS(`#username`), user),
			chromedp.Click(chromedp.CSS(`#sign-in`)))
		var said string
		if err == nil {
			said, err = chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS(`#connected`)))
		}
		cancel()
		if err != nil {
			t.Fatalf("the browser step of %s: %v", user, err)
		}
		if said == "" {
			t.Fatalf("the callback page said nothing to %s", user)
		}
		who, err := whoami(ctx, c, owner, "fx", r.fx.URL)
		if err != nil || who != user {
			t.Fatalf("whoami as %s: %q %v", user, who, err)
		}
	}
	if regs, _ := r.counts.get(); regs != 1 {
		t.Fatalf("%d dynamic registrations, want 1", regs)
	}
	reg, found, err := upstreamauth.VaultRegistrations(r.vault).Registration(ctx, "fx")
	if err != nil || !found || reg.Issuer != r.h.Issuer || reg.ClientSecret == "" {
		t.Fatalf("the registration kept: %v %v %v", reg, found, err)
	}
	// Restarted: the registration is the vault's.
	c2 := r.client(t, upstreamauth.Options{}, nil, upstreamauth.Upstream{Name: "fx", URL: r.fx.URL})
	if _, err := c2.Authorize(ctx, "key:carol", "fx"); err != nil {
		t.Fatal(err)
	}
	if regs, _ := r.counts.get(); regs != 1 {
		t.Fatalf("registered again after a restart: %d registrations", regs)
	}
	if who, err := whoami(ctx, c2, "key:bob", "fx", r.fx.URL); err != nil || who != "bob" {
		t.Fatalf("whoami as bob after a restart: %q %v", who, err)
	}
	noCredentialInLogs(t, r)
}
