package config

import (
	"strings"
	"testing"
	"time"
)

// mcp_tasks is read with its defaults left zero, and its mistakes are
// reported where they are.
func TestMCPTasksSection(t *testing.T) {
	cfg, err := parse("toolmux.yaml", []byte(`mcp_tasks:
  threshold: 2s
  thresholds:
    "fx/slow_*": 5s
    "other/*": 100ms
  long: ["fx/build"]
  required: ["fx/deploy"]
  max_running: 8
  poll_interval: 250ms
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	mt := cfg.MCPTasks
	if mt.Disabled || mt.Threshold != 2*time.Second || mt.MaxRunning != 8 || mt.PollInterval != 250*time.Millisecond ||
		len(mt.Long) != 1 || mt.Long[0] != "fx/build" || len(mt.Required) != 1 || len(mt.Thresholds) != 2 ||
		mt.Thresholds[0] != (ToolThreshold{"fx/slow_*", 5 * time.Second}) || mt.Thresholds[1].Tools != "other/*" {
		t.Errorf("%+v", mt)
	}
	cfg, err = parse("toolmux.yaml", []byte("mcp_tasks:\n  enabled: false\n"), Options{})
	if err != nil || !cfg.MCPTasks.Disabled {
		t.Errorf("disabled: %+v %v", cfg, err)
	}
	for src, want := range map[string]string{
		"mcp_tasks:\n  threshold: 5\n":                 "toolmux.yaml:2:14",
		"mcp_tasks:\n  thresholds:\n    \"a/[\": 1s\n": "toolmux.yaml:3:5",
		"mcp_tasks:\n  max_running: 0\n":               "toolmux.yaml:2:16",
		"mcp_tasks:\n  thresold: 1s\n":                 "toolmux.yaml:2:3",
	} {
		_, err := parse("toolmux.yaml", []byte(src), Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error at %s", src, err, want)
		}
	}
}
