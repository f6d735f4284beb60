package config_test

import (
	"reflect"
	"testing"

	"github.com/toolmux/toolmux/config"
)

func TestRateLimits(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`rate_limits:
  per_caller: {calls_per_minute: 120, burst: 20, concurrent: 8}
  callers:
    ci-bot: {calls_per_minute: 1200}
    ann: {concurrent: unlimited}
  groups:
    ci: {calls_per_minute: 600, concurrent: 32}
    interns: {concurrent: 4}
  max_callers: 500
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	want := config.RateLimits{
		PerCaller: config.RateLimit{CallsPerMinute: 120, Burst: 20, Concurrent: 8},
		Callers: map[string]config.RateLimit{
			"ci-bot": {CallsPerMinute: 1200},
			"ann":    {Concurrent: config.Unlimited},
		},
		Groups: map[string]config.RateLimit{
			"ci":      {CallsPerMinute: 600, Concurrent: 32},
			"interns": {Concurrent: 4},
		},
		MaxCallers: 500,
	}
	if !reflect.DeepEqual(cfg.RateLimits, want) {
		t.Errorf("rate_limits:\n got %+v\nwant %+v", cfg.RateLimits, want)
	}
	// Left out: the zero value, which limits nothing.
	cfg, err = config.ParseWith("toolmux.yaml", []byte("workspace: .\n"), config.Options{Dir: "/work"})
	if err != nil || !cfg.RateLimits.IsZero() {
		t.Errorf("without the section: %v %+v", err, cfg.RateLimits)
	}
}

func TestRateLimitsErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `rate_limits:
  per_caller:
    calls_per_minut: 10
    concurrent: unlimited
  callers:
    ann: {burst: 5}
    bob: {}
    eve: {calls_per_minute: 0, concurrent: many}
  groups:
    ci: {calls_per_minute: 1000001}
  max_callers: 0
rate_limit: {}
`, []wantErr{
		{3, 5, "rate_limits.per_caller.calls_per_minut", "unknown key (expected one of: calls_per_minute, burst, concurrent); did you mean calls_per_minute?"},
		{4, 17, "rate_limits.per_caller.concurrent", "unlimited lifts a per_caller limit for a caller of rate_limits.callers; here, leave the key out"},
		{6, 11, "rate_limits.callers.ann.burst", "burst needs calls_per_minute beside it"},
		{7, 10, "rate_limits.callers.bob", "sets no limit: give calls_per_minute (with burst) or concurrent"},
		{8, 29, "rate_limits.callers.eve.calls_per_minute", "must be between 1 and 1000000, got 0"},
		{8, 44, "rate_limits.callers.eve.concurrent", "expected an integer or unlimited, got"},
		{10, 28, "rate_limits.groups.ci.calls_per_minute", "must be between 1 and 1000000, got 1000001"},
		{11, 16, "rate_limits.max_callers", "must be between 1 and 10000000, got 0"},
		{12, 1, "rate_limit", "did you mean rate_limits?"},
	})
}
