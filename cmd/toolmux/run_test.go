package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/llmtest"
)

// runToolmux runs the binary in dir with env added to a clean model
// environment (no OPENAI_* or ANTHROPIC_* of whoever runs the tests).
func runToolmux(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = append(modelFreeEnv(), "XDG_DATA_HOME="+dataHome(t, dir))
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

// dataHome is the XDG_DATA_HOME of the runs in dir, so that a later
// `toolmux logs` in the same test reads the same task log.
func dataHome(t *testing.T, dir string) string {
	return dir + "/.xdg"
}

func modelFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OPENAI_") || strings.HasPrefix(kv, "ANTHROPIC_") || strings.HasPrefix(kv, "TOOLMUX_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func TestRunAnswers(t *testing.T) {
	dir := workspace(t, "")
	m := llmtest.OpenAI(t, llmtest.Replies(
		llmtest.Reply{Calls: []llmtest.Call{{Name: "builtin__read_file", Args: `{"path": "notes.txt"}`}}},
		llmtest.Reply{Content: "The notes list alpha, beta and gamma."},
	))
	r := runToolmux(t, dir, nil, "run", "--model", "scripted", "--base-url", m.BaseURL(), "What is in notes.txt?")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if strings.TrimSpace(r.stdout) != "The notes list alpha, beta and gamma." {
		t.Errorf("stdout: %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "✓ builtin/read_file") {
		t.Errorf("no progress line for the call:\n%s", r.stderr)
	}
	if reqs := m.Requests(); len(reqs) != 2 || !strings.Contains(reqs[1].Text(), "gamma") {
		t.Errorf("the model did not get the file: %d requests", len(reqs))
	}
	t.Log(r.stderr)
}

func TestRunWithoutModel(t *testing.T) {
	r := runToolmux(t, workspace(t, ""), nil, "run", "do something")
	if r.code != 2 || !strings.Contains(r.stderr, "no model is configured") || !strings.Contains(r.stderr, "--model") {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
}
