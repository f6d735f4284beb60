package config_test

import (
	"testing"

	"github.com/toolmux/toolmux/config"
)

func TestSubscriptions(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`subscriptions:
  max_listens: 200
  max_listens_per_client: 4
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (config.Subscriptions{MaxListens: 200, MaxListensPerClient: 4}); cfg.Subscriptions != want {
		t.Errorf("subscriptions: %+v", cfg.Subscriptions)
	}
	// Left out: the zero value, which means the gateway's defaults.
	cfg, err = config.ParseWith("toolmux.yaml", []byte("workspace: .\n"), config.Options{Dir: "/work"})
	if err != nil || cfg.Subscriptions != (config.Subscriptions{}) {
		t.Errorf("without the section: %v %+v", err, cfg.Subscriptions)
	}
}

func TestSubscriptionsErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `subscriptions:
  max_listens: 0
  max_listens_per_client: 1000001
  max_listen: 5
subscription: {}
`, []wantErr{
		{2, 16, "subscriptions.max_listens", "must be between 1 and 1000000, got 0"},
		{3, 27, "subscriptions.max_listens_per_client", "must be between 1 and 1000000, got 1000001"},
		{4, 3, "subscriptions.max_listen", "unknown key (expected one of: max_listens, max_listens_per_client); did you mean max_listens?"},
		{5, 1, "subscription", "did you mean subscriptions?"},
	})
}
