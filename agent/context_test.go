package agent_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/tasklog"
)

// big calls the fixture's big tool for n bytes.
func big(n int) llmtest.Reply {
	return calls(call("fixture__big", fmt.Sprintf(`{"bytes": %d}`, n)))
}

// elided is the marker of an elided result of n characters.
func elided(n int) string {
	return fmt.Sprintf("[Result elided to save context: %d characters. Call the tool again if you need it.]", n)
}

// toolResults returns the contents of a request's tool messages.
func toolResults(req llmtest.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m["role"] == "tool" {
			s, _ := m["content"].(string)
			out = append(out, s)
		}
	}
	return out
}

// wantResults checks a request's tool results: whole[i] is the size of a
// result sent whole, -size one elided.
func wantResults(t *testing.T, req llmtest.Request, sizes ...int) {
	t.Helper()
	got := toolResults(req)
	if len(got) != len(sizes) {
		t.Fatalf("%d tool results, want %d", len(got), len(sizes))
	}
	for i, n := range sizes {
		switch {
		case n < 0 && got[i] != elided(-n):
			t.Fatalf("result %d is %.80q, want it elided (%d characters)", i, got[i], -n)
		case n > 0 && len(got[i]) != n:
			t.Fatalf("result %d has %d characters, want %d whole: %.80q", i, len(got[i]), n, got[i])
		}
	}
}

// keep_tool_results: 1 sends the latest result whole and elides every
// older one; the task log keeps them all whole.
func TestContextKeepToolResults(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(big(1000), big(1100), big(1200), answer("done")), `agent: {context: {keep_tool_results: 1}}`)
	res, err := r.run(t, "Read big outputs.")
	if err != nil {
		t.Fatal(err)
	}
	reqs := r.model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	wantResults(t, reqs[1], 1000)
	wantResults(t, reqs[2], -1000, 1100)
	wantResults(t, reqs[3], -1000, -1100, 1200)
	if res.Elided != 2 {
		t.Fatalf("result: %+v", res)
	}
	h := history(t, r.messages(t, res.Task, tasklog.MainSession))
	if strings.Contains(h, "[Result elided") {
		t.Fatalf("the task log has elided results:\n%.2000s", h)
	}
}

// keep_tool_results: 0 still sends the latest turn's results whole.
func TestContextKeepNone(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		big(1000),
		calls(call("fixture__big", `{"bytes": 1100}`), call("fixture__big", `{"bytes": 1200}`)),
		answer("done"),
	), `agent: {context: {keep_tool_results: 0}}`)
	if _, err := r.run(t, "Read big outputs."); err != nil {
		t.Fatal(err)
	}
	reqs := r.model.Requests()
	wantResults(t, reqs[1], 1000)
	wantResults(t, reqs[2], -1000, 1100, 1200)
}

// A max_tokens budget elides the oldest results, and only as many as it
// takes.
func TestContextMaxTokens(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(big(4000), big(4004), big(4008), answer("done")),
		`agent: {context: {keep_tool_results: -1, max_tokens: 2500}}`)
	res, err := r.run(t, "Read big outputs.")
	if err != nil {
		t.Fatal(err)
	}
	reqs := r.model.Requests()
	wantResults(t, reqs[1], 4000)
	wantResults(t, reqs[2], 4000, 4004)
	wantResults(t, reqs[3], -4000, 4004, 4008)
	if res.Elided != 1 || res.Answer != "done" {
		t.Fatalf("result: %+v", res)
	}
}

// requestTokens estimates a request the way the agent's budget does: the
// system prompt, and each message with its overhead.
func requestTokens(req llmtest.Request) int {
	n := agent.Tokens(req.System)
	for _, m := range req.Messages[1:] { // the first is the system prompt
		s, _ := m["content"].(string)
		n += 4 + agent.Tokens(s)
	}
	return n
}

// The budget counts the system prompt the model gets: with the text
// protocol, the tool listing it carries.
func TestContextMaxTokensCountsTheSystemPrompt(t *testing.T) {
	t.Parallel()
	const budget = 1000
	r := newRig(t, llmtest.Replies(
		textCall("fixture", "big", `{"bytes": 1200}`),
		textCall("fixture", "big", `{"bytes": 1204}`),
		answer("done"),
	), fmt.Sprintf(`agent: {tool_protocol: text, tools: [fixture/big], context: {keep_tool_results: -1, max_tokens: %d}}`, budget))
	if _, err := r.run(t, "Read big outputs."); err != nil {
		t.Fatal(err)
	}
	reqs := r.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	last := reqs[2]
	n, system := requestTokens(last), agent.Tokens(last.System)
	if n > budget {
		t.Fatalf("the last request is estimated at %d tokens (system prompt %d), over the budget of %d:\n%.300s",
			n, system, budget, last.Text())
	}
	first := "Result of fixture/big:\n" + strings.Repeat("x", 1200)
	if !strings.Contains(last.Text(), elided(len(first))) {
		t.Fatalf("the older result was not elided:\n%.300s", last.Text())
	}
	// What the test shows: sent whole, the older result would fit the
	// budget without the system prompt, and not with it.
	whole := n - agent.Tokens(elided(len(first))) + agent.Tokens(first)
	if whole <= budget || whole-system > budget {
		t.Fatalf("the test's sizes no longer fit its purpose: %d tokens whole, %d of system prompt, budget %d", whole, system, budget)
	}
}

// Tokens counts about four bytes of ASCII per token and a token per
// character of other scripts.
func TestTokens(t *testing.T) {
	for text, want := range map[string]int{
		"":                          0,
		"abcd":                      1,
		"abcde":                     2,
		strings.Repeat("a", 4000):   1000,
		"日本語のテキスト":                  8,
		"Привет":                    6,
		"The answer is 日本 (Japan).": 8,
	} {
		if got := agent.Tokens(text); got != want {
			t.Errorf("Tokens(%q) = %d, want %d", text, got, want)
		}
	}
}

// ctxTooLong is how OpenAI says a conversation does not fit.
const ctxTooLong = `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`

// When the model says the context is too long, older results are elided
// and the turn asked again; a second time, the run ends with a forced
// summary.
func TestContextLengthError(t *testing.T) {
	t.Parallel()
	t.Run("elide and retry", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, llmtest.Replies(
			big(1000), big(1100),
			llmtest.Reply{Status: 400, Body: ctxTooLong},
			big(1200),
			answer("done"),
		), "")
		res, err := r.run(t, "Read big outputs.")
		if err != nil {
			t.Fatal(err)
		}
		if res.Answer != "done" || res.Status != agent.StatusAnswered || res.Turns != 4 {
			t.Fatalf("result: %+v", res)
		}
		if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "context was exceeded") {
			t.Fatalf("notes: %q", res.Notes)
		}
		reqs := r.model.Requests()
		if len(reqs) != 5 {
			t.Fatalf("%d requests", len(reqs))
		}
		wantResults(t, reqs[2], 1000, 1100) // refused
		wantResults(t, reqs[3], -1000, 1100)
		wantResults(t, reqs[4], -1000, -1100, 1200)
	})
	t.Run("summary", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, llmtest.Replies(
			big(1000),
			llmtest.Reply{Status: 400, Body: ctxTooLong},
			llmtest.Reply{Status: 400, Body: ctxTooLong},
			answer("Summary so far."),
		), "")
		res, err := r.run(t, "Read big outputs.")
		if err != nil {
			t.Fatal(err)
		}
		if res.Answer != "Summary so far." || res.Status != agent.StatusContext {
			t.Fatalf("result: %+v", res)
		}
		reqs := r.model.Requests()
		if len(reqs) != 4 {
			t.Fatalf("%d requests", len(reqs))
		}
		if last := reqs[3]; last.ToolChoice != "none" || !strings.Contains(last.Text(), "You have reached the limit of the model's context") {
			t.Fatalf("the summary request: %v\n%.500s", last.ToolChoice, last.Text())
		}
	})
}
