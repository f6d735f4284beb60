package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// The web page of toolmux serve, in a real headless Chromium against a real
// toolmux serve process. Screenshots of each step go to $TOOLMUX_ARTIFACTS
// (default: toolmux-artifacts in the temporary directory), for a person to
// look at.

const uiChromium = "/usr/bin/chromium"

// uiMaxRows is live.js's MAX_ROWS: the rows the live view keeps.
const uiMaxRows = 500

// uiBrowser is one headless Chromium tab, and what its console said.
type uiBrowser struct {
	ctx     context.Context
	t       *testing.T
	console *uiConsole
}

// uiConsole keeps the exceptions and CSP refusals the page reported.
type uiConsole struct {
	mu       sync.Mutex
	problems []string
}

// on returns the same tab for a subtest, so that its failures stop the
// subtest and not its parent.
func (b *uiBrowser) on(t *testing.T) *uiBrowser {
	return &uiBrowser{ctx: b.ctx, t: t, console: b.console}
}

// newUIBrowser starts Chromium with a fresh profile, or skips the test when
// it is not installed (fails it with TOOLMUX_REQUIRE_PEERS set:
// testservers.Missing). The tab
// lives until the test ends; each action is bounded by the test's own
// waits.
func newUIBrowser(t *testing.T) *uiBrowser {
	t.Helper()
	if _, err := os.Stat(uiChromium); err != nil {
		testservers.Missing(t, "Chromium is not installed at %s (apt-get install chromium): %v", uiChromium, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(uiChromium),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// A headless tab is never hidden, but keep timers and frames at full
		// speed whatever the machine's load.
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	b := &uiBrowser{ctx: ctx, t: t, console: &uiConsole{}}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting Chromium: %v", err)
	}
	// The page must run under its Content-Security-Policy without a
	// refusal, and without an uncaught exception.
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			text := m.String()
			if m.IsException() || strings.Contains(text, "Content Security Policy") {
				b.console.mu.Lock()
				b.console.problems = append(b.console.problems, text)
				b.console.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		b.console.mu.Lock()
		defer b.console.mu.Unlock()
		for _, p := range b.console.problems {
			t.Errorf("browser console: %s", p)
		}
	})
	return b
}

// do runs actions within a minute.
func (b *uiBrowser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.shot("failure")
		b.t.Fatalf("browser: %v", err)
	}
}

// visible waits for an element to be visible.
func (b *uiBrowser) visible(css string) {
	b.t.Helper()
	b.do(chromedp.WaitVisible(chromedp.CSS(css)))
}

// eval evaluates a JavaScript expression in the page.
func uiEval[T any](b *uiBrowser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// until evaluates a boolean expression in the page until it is true.
// (chromedp's Poll compiles its predicate with new Function, which the
// page's Content-Security-Policy forbids, as it should.)
func (b *uiBrowser) until(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.shot("failure")
			b.t.Fatalf("waited a minute for %s (%s): %v", what, expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fill sets the value of an input as typing does, with an input event.
func (b *uiBrowser) fill(css, value string) {
	b.t.Helper()
	js, _ := json.Marshal(css)
	v, _ := json.Marshal(value)
	uiEval[bool](b, fmt.Sprintf(`(() => { const el = document.querySelector(%s); el.value = %s; el.dispatchEvent(new Event('input', {bubbles: true})); el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, js, v))
}

// text returns an element's text.
func (b *uiBrowser) text(css string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(css)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", css, err)
	}
	return s
}

// artifacts is where screenshots go: $TOOLMUX_ARTIFACTS, else
// toolmux-artifacts in $GOTMPDIR or the system's temporary directory.
func uiArtifacts(t *testing.T) string {
	dir := os.Getenv("TOOLMUX_ARTIFACTS")
	if dir == "" {
		tmp := os.Getenv("GOTMPDIR")
		if tmp == "" {
			tmp = os.TempDir()
		}
		dir = filepath.Join(tmp, "toolmux-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// shot saves a full-page PNG screenshot as TEST-name.png.
func (b *uiBrowser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	file := filepath.Join(uiArtifacts(b.t), strings.ReplaceAll(b.t.Name(), "/", "-")+"-"+name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", file)
}

// uiAPICall makes a call through the HTTP API and returns its status and
// record.
func uiAPICall(t *testing.T, s *serveProc, token, server, tool, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url("/api/tools/"+server+"/"+tool+"/call"), strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Errorf("call %s/%s: %d %s", server, tool, resp.StatusCode, b)
	}
	return resp.StatusCode, rec
}

// The page against a real gateway: the catalog; a call through /mcp by a
// real MCP client, live with its final state; a call that needs approval,
// approved by a click; the call form; the tasks; pausing and resuming the
// stream without losing an event; the page's own modules (SSE parsing,
// argument skeletons) in the browser.
func TestBrowserUI(t *testing.T) {
	t.Parallel()
	s := startServeProc(t, workspace(t, ""), "")
	b := newUIBrowser(t)

	b.do(chromedp.Navigate(s.url("/")))
	b.visible(`#conn[data-state="live"]`)
	// Not a fleet's gateway (/api/fleet answers 404): no Fleet tab, and
	// its address shows the Live view.
	b.until("the fleet probe", `document.documentElement.dataset.fleet === 'absent'`)
	if !uiEval[bool](b, `document.querySelector('nav [data-tab="fleet"]').hidden`) {
		t.Error("the Fleet tab shows on a gateway that is not a fleet's")
	}

	t.Run("catalog", func(t *testing.T) {
		b := b.on(t)
		b.do(chromedp.Navigate(s.url("/#catalog")))
		b.visible(`#tools tr[data-name="builtin__read_file"]`)
		b.visible(`#tools tr[data-name="builtin__shell"][data-approval="ask"] .badge.approval-ask`)
		b.visible(`#servers tr[data-server="builtin"] .badge.state-ready`)
		b.until("the endpoints", `document.getElementById('endpoints').textContent.includes('/mcp')`)
		// The filters narrow the list: by approval, by text.
		b.fill(`#tools-approval`, "ask")
		b.until("the approval filter", `(() => {
			const shown = [...document.querySelectorAll('#tools tbody tr')].filter(r => !r.hidden);
			return shown.length > 0 && shown.every(r => r.dataset.approval === 'ask') && shown.some(r => r.dataset.name === 'builtin__shell');
		})()`)
		b.fill(`#tools-approval`, "")
		b.do(chromedp.SendKeys(chromedp.CSS(`#tools-filter`), "read_file"))
		b.until("the text filter", `(() => {
			const shown = [...document.querySelectorAll('#tools tbody tr')].filter(r => !r.hidden).map(r => r.dataset.name);
			return shown.includes('builtin__read_file') && shown.length < document.querySelectorAll('#tools tbody tr').length;
		})()`)
		b.shot("catalog")
		b.fill(`#tools-filter`, "")
	})

	b.do(chromedp.Navigate(s.url("/#live")))
	b.visible(`#conn[data-state="live"]`)

	t.Run("mcp call live", func(t *testing.T) {
		b := b.on(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "browser-test"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: s.url("/mcp")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "builtin__read_file", Arguments: map[string]any{"path": "notes.txt"}})
		if err != nil || res.IsError {
			t.Fatalf("read_file through /mcp: %v %+v", err, res)
		}
		row := `#live-rows .row[data-name="builtin__read_file"][data-state="success"]`
		b.visible(row)
		if got := b.text(row + ` .c-detail`); !strings.Contains(got, "alpha") {
			t.Errorf("the row shows %q, want the result (alpha…)", got)
		}
		// A failing call shows its error kind.
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "builtin__read_file", Arguments: map[string]any{"path": "missing.txt"}})
		if err != nil || !res.IsError {
			t.Fatalf("read_file of a missing file: %v %+v", err, res)
		}
		bad := `#live-rows .row[data-name="builtin__read_file"][data-state="error"]`
		b.visible(bad)
		if got := b.text(bad + ` .c-detail`); !strings.Contains(got, "file_not_found") {
			t.Errorf("the failed row shows %q, want its kind", got)
		}
		// Its details: states, arguments, result.
		b.do(chromedp.Click(chromedp.CSS(row + ` > summary`)))
		b.visible(row + ` .states`)
		if got := b.text(row + ` .body`); !strings.Contains(got, `"path": "notes.txt"`) || !strings.Contains(got, "executing") {
			t.Errorf("the details show %q", got)
		}
		b.shot("live")
	})

	t.Run("approval", func(t *testing.T) {
		b := b.on(t)
		type answer struct {
			code int
			rec  map[string]any
		}
		done := make(chan answer, 1)
		go func() {
			code, rec := uiAPICall(t, s, "", "builtin", "shell", `{"arguments": {"command": "echo approved-in-the-browser"}, "task": "browser-task"}`)
			done <- answer{code, rec}
		}()
		card := `.approval button[data-decision="once"]`
		b.visible(card)
		b.visible(`#live-rows .row[data-name="builtin__shell"][data-state="awaiting_approval"]`)
		id := uiEval[string](b, `document.querySelector('.approval').dataset.callId`)
		if !strings.Contains(b.text(`.approval[data-call-id="`+id+`"] .args`), "approved-in-the-browser") {
			t.Errorf("the card does not show the command")
		}
		b.shot("approval")
		// Its four answers on one row, inside the card, at every width a
		// page is used at (its cards are narrowest where the grid adds a
		// column).
		for width := int64(760); width <= 1920; width += 20 {
			b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: width, Height: 900, DeviceScaleFactor: 1})
				return err
			}))
			got := uiEval[string](b, `JSON.stringify((() => {
				const card = document.querySelector('.approval[data-call-id="`+id+`"]').getBoundingClientRect();
				const boxes = [...document.querySelectorAll('.approval[data-call-id="`+id+`"] .actions button')].map((el) => el.getBoundingClientRect());
				return {buttons: boxes.length, tops: new Set(boxes.map((r) => Math.round(r.top))).size,
					inside: boxes.every((r) => r.left >= card.left && r.right <= card.right)};
			})())`)
			if want := `{"buttons":4,"tops":1,"inside":true}`; got != want {
				b.shot(fmt.Sprintf("approval-%d", width))
				t.Errorf("at %d px wide, the card's buttons: %s, want %s", width, got, want)
			}
		}
		b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.ClearDeviceMetricsOverride, cdp.Empty{})
			return err
		}))
		b.do(chromedp.Click(chromedp.CSS(`.approval[data-call-id="` + id + `"] button[data-decision="once"]`)))
		var got answer
		select {
		case got = <-done:
		case <-time.After(time.Minute):
			b.shot("failure")
			t.Fatal("the approved call did not return")
		}
		if got.code != http.StatusOK || !strings.Contains(fmt.Sprint(got.rec["result"]), "approved-in-the-browser") {
			t.Fatalf("the approved call: %d %v", got.code, got.rec)
		}
		b.visible(`#live-rows .row[data-call-id="` + id + `"][data-state="success"]`)
		b.do(chromedp.WaitNotVisible(chromedp.CSS(`#approvals`)))
		b.shot("approved")
	})

	t.Run("withdrawn", func(t *testing.T) {
		// A call waits on the page while its client waits; the client
		// hears where to answer; when the client gives up, the card goes,
		// and an answer given afterwards runs nothing.
		b := b.on(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		progress := make(chan string, 16)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "leaver"}, &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				select {
				case progress <- r.Params.Message:
				default:
				}
			}}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.url("/mcp")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		callCtx, leave := context.WithCancel(ctx)
		go func() {
			p := &mcp.CallToolParams{Name: "builtin__write_file", Arguments: map[string]any{"path": "left.txt", "content": "x"}}
			p.SetProgressToken("p")
			_, _ = cs.CallTool(callCtx, p)
		}()
		b.visible(`.approval button[data-decision="once"]`)
		id := uiEval[string](b, `document.querySelector('.approval').dataset.callId`)
		select {
		case msg := <-progress:
			if !strings.Contains(msg, "waiting for approval of builtin/write_file") || !strings.Contains(msg, s.url("/")) {
				t.Errorf("the client heard %q", msg)
			}
		case <-time.After(30 * time.Second):
			t.Error("the waiting client heard no progress")
		}
		b.shot("waiting")
		leave()
		b.do(chromedp.WaitNotPresent(chromedp.CSS(`.approval[data-call-id="` + id + `"]`)))
		b.visible(`#live-rows .row[data-call-id="` + id + `"][data-state="cancelled"]`)
		b.shot("withdrawn")
		resp, err := http.Post(s.url("/api/approvals/"+id), "application/json", strings.NewReader(`{"decision": "once"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusGone {
			t.Errorf("answering a withdrawn call: %s", resp.Status)
		}
		if _, err := os.Stat(filepath.Join(s.dir, "left.txt")); err == nil {
			t.Error("the withdrawn call ran")
		}
	})

	t.Run("call form", func(t *testing.T) {
		b := b.on(t)
		b.do(chromedp.Navigate(s.url("/#call")))
		b.do(chromedp.WaitReady(chromedp.CSS(`#call-tool option[value="builtin__read_file"]`)))
		b.fill(`#call-tool`, "builtin__read_file")
		// The arguments are prefilled from the schema: path is required.
		if args := uiEval[string](b, `document.getElementById('call-args').value`); !strings.Contains(args, `"path": ""`) {
			t.Errorf("prefilled arguments %q", args)
		}
		b.do(chromedp.SetValue(chromedp.CSS(`#call-args`), `{"path": "notes.txt", "limit": 2}`),
			chromedp.Click(chromedp.CSS(`#call-submit`)))
		b.visible(`#call-result .record[data-outcome="success"]`)
		if got := b.text(`#call-result .result pre`); !strings.Contains(got, "beta") || strings.Contains(got, "gamma") {
			t.Errorf("the result shows %q", got)
		}
		// Bad JSON is refused before anything is sent; an error the
		// gateway answers is shown with its kind.
		b.do(chromedp.SetValue(chromedp.CSS(`#call-args`), `{"path": `), chromedp.Click(chromedp.CSS(`#call-submit`)))
		b.visible(`#call-args-error`)
		b.do(chromedp.SetValue(chromedp.CSS(`#call-args`), `{"path": "../../etc/passwd"}`), chromedp.Click(chromedp.CSS(`#call-submit`)))
		b.visible(`#call-result .record[data-outcome="path_not_in_workspace"] .error-box`)
		b.shot("call")
	})

	t.Run("tasks", func(t *testing.T) {
		b := b.on(t)
		b.do(chromedp.Navigate(s.url("/#tasks")))
		b.visible(`#tasks tr[data-task="browser-task"]`)
		b.do(chromedp.Click(chromedp.CSS(`#tasks tr[data-task="browser-task"]`)))
		b.visible(`#task-detail details.call`)
		b.do(chromedp.Click(chromedp.CSS(`#task-detail details.call > summary`)))
		b.visible(`#task-detail details.call .record[data-outcome="success"]`)
		if got := b.text(`#task-detail`); !strings.Contains(got, "builtin__shell") {
			t.Errorf("the task shows %q", got)
		}
		b.shot("tasks")
		// The open task is in the address: a reload opens it again.
		if hash := uiEval[string](b, `location.hash`); hash != "#tasks/browser-task" {
			t.Errorf("the address of the open task: %q", hash)
		}
		b.do(chromedp.Reload())
		b.visible(`#task-detail[data-task="browser-task"] details.call`)
		b.visible(`#tasks tr[data-task="browser-task"].selected`)
	})

	t.Run("pause and resume", func(t *testing.T) {
		b := b.on(t)
		b.do(chromedp.Navigate(s.url("/#live")))
		b.visible(`#conn[data-state="live"]`)
		// Something to resume from: the stream has delivered an event.
		_, first := uiAPICall(t, s, "", "builtin", "list_directory", `{"arguments": {"path": "."}}`)
		b.visible(`#live-rows .row[data-call-id="` + fmt.Sprint(first["id"]) + `"][data-state="success"]`)
		b.do(chromedp.Click(chromedp.CSS(`#pause`)))
		b.visible(`#conn[data-state="paused"]`)
		// Calls made while the page does not listen are replayed when it
		// resumes, because it reconnects with Last-Event-ID.
		var ids []string
		for range 3 {
			code, rec := uiAPICall(t, s, "", "builtin", "list_directory", `{"arguments": {"path": "."}}`)
			if code != http.StatusOK {
				t.Fatalf("call: %d %v", code, rec)
			}
			ids = append(ids, fmt.Sprint(rec["id"]))
		}
		for _, id := range ids {
			if n := uiEval[int](b, `document.querySelectorAll('#live-rows .row[data-call-id="`+id+`"]').length`); n != 0 {
				t.Fatalf("a call made while paused is shown before resuming")
			}
		}
		b.do(chromedp.Click(chromedp.CSS(`#pause`)))
		b.visible(`#conn[data-state="live"]`)
		for _, id := range ids {
			b.visible(`#live-rows .row[data-call-id="` + id + `"][data-state="success"]`)
		}
		// Each call once: no duplicate rows from the replay.
		if n := uiEval[int](b, `new Set([...document.querySelectorAll('#live-rows .row[data-kind="call"]')].map(r => r.dataset.callId)).size === document.querySelectorAll('#live-rows .row[data-kind="call"]').length ? 1 : 0`); n != 1 {
			t.Error("a call has two rows after resuming")
		}
	})

	t.Run("recent past on a fresh load", func(t *testing.T) {
		b := b.on(t)
		// A new page shows what the gateway did before it was opened
		// (the calls above), each call once, in its end state...
		b.do(chromedp.Reload())
		b.visible(`#conn[data-state="live"]`)
		b.visible(`#live-rows .row[data-name="builtin__shell"][data-state="success"]`)
		b.visible(`#live-rows .row[data-name="builtin__read_file"][data-state="error"]`)
		if uiEval[bool](b, `!document.getElementById('live-empty').hidden`) {
			t.Error("a page opened after calls says there is nothing yet")
		}
		if n := uiEval[int](b, `new Set([...document.querySelectorAll('#live-rows .row[data-kind="call"]')].map(r => r.dataset.callId)).size === document.querySelectorAll('#live-rows .row[data-kind="call"]').length ? 1 : 0`); n != 1 {
			t.Error("a call has two rows on a fresh page")
		}
		// ...then goes on live: a new call on top.
		_, rec := uiAPICall(t, s, "", "builtin", "list_directory", `{"arguments": {"path": "."}}`)
		b.visible(`#live-rows .row[data-call-id="` + fmt.Sprint(rec["id"]) + `"][data-state="success"]`)
		b.until("the new call on top", `document.querySelector('#live-rows .row[data-kind="call"]').dataset.callId === '`+fmt.Sprint(rec["id"])+`'`)
		b.shot("fresh-load")
	})

	t.Run("modules", func(t *testing.T) {
		b := b.on(t)
		// The SSE parser by the WHATWG rules, fed in awkward chunks.
		got := uiEval[string](b, `(async () => {
			const {SSEParser} = await import('/ui/sse.js');
			const run = (chunks, lastEventId = '') => {
				const out = [];
				const retries = [];
				const p = new SSEParser((e) => out.push([e.type, e.data, e.lastEventId]), {lastEventId, onRetry: (ms) => retries.push(ms)});
				for (const c of chunks) p.push(c);
				p.end();
				return JSON.stringify({out, retries, last: p.lastEventId});
			};
			return [
				run(['id: 1\r', '\nevent: tool_state\r\ndata: {"a":1}\r', '\n\r\n']),
				run(['\uFEFFdata: a\n', 'data:  b\ndata\n\n']),
				run([': comment\nretry: 12a\nretry: 250\nid: 7\0\ndata: x\r\rdata: tail']),
				run(['data: no id\n\n'], '41'),
				run(['id: 9\nevent: gap\n\n', 'data: after\n\n']),
			].join('\n');
		})()`)
		want := strings.Join([]string{
			`{"out":[["tool_state","{\"a\":1}","1"]],"retries":[],"last":"1"}`,
			`{"out":[["message","a\n b\n",""]],"retries":[],"last":""}`,
			`{"out":[["message","x",""]],"retries":[250],"last":""}`,
			`{"out":[["message","no id","41"]],"retries":[],"last":"41"}`,
			`{"out":[["message","after","9"]],"retries":[],"last":"9"}`,
		}, "\n")
		if got != want {
			t.Errorf("SSE parser:\n got %s\nwant %s", got, want)
		}
		// A range of events read on a connection of its own, which ends
		// at the end of the range (what "Load them" on a gap does).
		got = uiEval[string](b, `(async () => {
			const {readRange} = await import('/ui/stream.js');
			const ids = [];
			const n = await readRange(2, 5, (e) => ids.push(e.id));
			return JSON.stringify({n, ids});
		})()`)
		if want := `{"n":4,"ids":[2,3,4,5]}`; got != want {
			t.Errorf("readRange: %s, want %s", got, want)
		}
		// Arguments prefilled from a schema: required properties, and
		// optional ones with a default.
		got = uiEval[string](b, `(async () => {
			const {skeleton} = await import('/ui/catalog.js');
			return JSON.stringify(skeleton({type: 'object', required: ['path', 'n', 'tags', 'mode', 'opt'],
				properties: {path: {type: 'string'}, n: {type: 'integer', minimum: 1}, tags: {type: 'array'},
					mode: {enum: ['fast', 'slow']}, opt: {type: ['null', 'object'], properties: {deep: {type: 'boolean'}}, required: ['deep']},
					limit: {type: 'integer', default: 10}, skip: {type: 'boolean'}}}));
		})()`)
		if want := `{"path":"","n":1,"tags":[],"mode":"fast","opt":{"deep":false},"limit":10}`; got != want {
			t.Errorf("skeleton: %s, want %s", got, want)
		}
	})

	// The events of an agent run (no agent runs in toolmux serve yet, so
	// they are fed to the live view's model directly), shown in the page
	// beside the real rows for the screenshot.
	t.Run("agent events", func(t *testing.T) {
		b := b.on(t)
		b.do(chromedp.Navigate(s.url("/#live")))
		b.visible(`#conn[data-state="live"]`)
		got := uiEval[string](b, `(async () => {
			const {Live} = await import('/ui/live.js');
			const rows = document.createElement('div');
			rows.className = 'live-rows';
			rows.id = 'synthetic';
			document.getElementById('live-rows').before(rows);
			const el = () => document.createElement('span');
			const live = new Live({rows, stats: el(), empty: el(), capped: el(), onLoadRange: async () => 0, onFilterTask: () => {}});
			const at = (s) => new Date(Date.UTC(2026, 10, 22, 10, 0, s)).toISOString();
			const ag = {agent_name: 'main', display_name: 'Main agent'};
			const st = (id, s, state, extra = {}) => ({id, event: 'tool_state', task: 't-1', time: at(s),
				data: {call_id: 'c-1', batch: 'b-1', index: 0, server: 'builtin', tool: 'read_file', state, ...extra}});
			const events = [
				{id: 1, event: 'start_of_workflow', task: 't-1', time: at(0), data: {workflow_id: 'wf-1', input: [{role: 'user', content: 'Summarise README.md'}]}},
				{id: 2, event: 'start_of_agent', task: 't-1', time: at(0), data: {...ag, agent_id: 'ag-1'}},
				{id: 3, event: 'start_of_llm', task: 't-1', time: at(1), data: ag},
				{id: 4, event: 'message', task: 't-1', time: at(2), data: {message_id: 'msg-1', delta: {content: 'Let me read '}}},
				{id: 5, event: 'message', task: 't-1', time: at(2), data: {message_id: 'msg-1', delta: {content: 'the file'}}},
				{id: 6, event: 'end_of_llm', task: 't-1', time: at(3), data: ag},
				{id: 7, event: 'tool_call', task: 't-1', time: at(3), data: {tool_call_id: 'c-1', tool_name: 'builtin__read_file', tool_input: {path: 'README.md'}}},
				{id: 9, event: 'tool_output', task: 't-1', time: at(4), data: {call_id: 'c-1', server: 'builtin', tool: 'read_file', progress: {progress: 3, total: 10, message: 'page 3 of 10'}}},
				st(8, 3, 'executing', {previous_state: 'scheduled', previous_ms: 0.1, total_ms: 0.2}),
				st(10, 5, 'success', {previous_state: 'executing', previous_ms: 2000, total_ms: 2000.2}),
				{id: 11, event: 'tool_call', task: 't-1', time: at(5), data: {tool_call_id: 'c-1', tool_name: 'builtin__read_file', tool_input: {result: '# toolmux'}}},
				{id: 12, event: 'end_of_agent', task: 't-1', time: at(30), data: {...ag, agent_id: 'ag-1'}},
				{event: 'gap', task: 't-1', time: at(31), data: {missed: 312, from_id: 13, to_id: 324, reason: 'slow'}},
				{id: 325, event: 'show_error', task: 't-1', time: at(40), data: {error: 'the model provider answered 401'}},
				{id: 326, event: 'end_of_workflow', task: 't-1', time: at(41), data: {workflow_id: 'wf-1'}},
			];
			for (const e of events) live.handle(e);
			live.flush();
			return JSON.stringify([...rows.children].map((r) => [r.dataset.kind, r.dataset.state,
				r.querySelector('.c-what').textContent, r.querySelector('.c-detail').textContent, r.querySelector('.c-dur').textContent]));
		})()`)
		want := `[["error","error","error","the model provider answered 401",""],` +
			`["gap","gap","gap","312 events missed (ids 13–324, slow)",""],` +
			`["call","success","builtin__read_file","# toolmux","2.00 s"],` +
			`["message","message","message","Let me read the file",""],` +
			`["llm","done","LLM · Main agent","model turn","2.00 s"],` +
			`["agent","done","agent Main agent","main","30.0 s"],` +
			`["workflow","failed","workflow wf-1","Summarise README.md","41.0 s"]]`
		if got != want {
			t.Errorf("agent events:\n got %s\nwant %s", got, want)
		}
		b.do(chromedp.Click(chromedp.CSS(`#synthetic .row[data-kind="call"] > summary`)))
		b.visible(`#synthetic .row[data-kind="call"] .states`)
		b.shot("agent-events")
		uiEval[bool](b, `(document.getElementById('synthetic').remove(), true)`)
	})

	// The same page in the system's dark mode.
	t.Run("dark", func(t *testing.T) {
		b := b.on(t)
		dark := func(on bool) chromedp.Action[chromedp.Void] {
			return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				var features []*emulation.MediaFeature
				if on {
					features = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}
				}
				_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: features})
				return err
			})
		}
		b.do(dark(true))
		defer b.do(dark(false))
		b.until("dark colours", `getComputedStyle(document.body).backgroundColor === 'rgb(18, 21, 27)'`)
		b.do(chromedp.Click(chromedp.CSS(`#live-rows .row[data-kind="call"][data-state="error"] > summary`)))
		b.shot("dark")
	})

	// The live view keeps at most maxRows rows, never drops a call that
	// still runs, and ignores late events of a dropped row.
	t.Run("row cap", func(t *testing.T) {
		b := b.on(t)
		got := uiEval[string](b, `(async () => {
			const {Live, MAX_ROWS} = await import('/ui/live.js');
			const rows = document.createElement('div');
			const el = () => document.createElement('span');
			const live = new Live({rows, stats: el(), empty: el(), capped: el(), onLoadRange: async () => 0, onFilterTask: () => {}});
			const time = new Date().toISOString();
			const state = (id, call, s) => ({id, event: 'tool_state', time, data: {call_id: call, server: 'fx', tool: 'echo', state: s, total_ms: 1}});
			let id = 0;
			live.handle(state(++id, 'running', 'executing'));
			for (let i = 0; i < MAX_ROWS + 100; i++) {
				live.handle(state(++id, 'c' + i, 'executing'));
				live.handle(state(++id, 'c' + i, 'success'));
			}
			live.flush();
			live.handle(state(++id, 'c0', 'error')); // c0 was dropped
			live.flush();
			return JSON.stringify({max: MAX_ROWS, rows: rows.children.length,
				running: !!rows.querySelector('[data-call-id="running"][data-state="executing"]'),
				c0: !!rows.querySelector('[data-call-id="c0"]'), last: !!rows.querySelector('[data-call-id="c599"]')});
		})()`)
		if want := fmt.Sprintf(`{"max":%d,"rows":%d,"running":true,"c0":false,"last":true}`, uiMaxRows, uiMaxRows); got != want {
			t.Errorf("row cap: %s, want %s", got, want)
		}
	})

	// A running row's duration runs from its events' own times to the
	// gateway's now: an event that arrives late (replayed on resumption,
	// as to a page opened late) is not taken for one just stamped, and a
	// gateway whose clock differs from the browser's (its answers' Date)
	// is allowed for.
	t.Run("durations from the events' times", func(t *testing.T) {
		b := b.on(t)
		got := uiEval[string](b, `(async () => {
			const {Live} = await import('/ui/live.js');
			const shown = (clock, stamped) => {
				const rows = document.createElement('div');
				const el = () => document.createElement('span');
				const live = new Live({rows, stats: el(), empty: el(), capped: el(), onLoadRange: async () => 0, onFilterTask: () => {}});
				if (clock) live.clock(clock);
				live.handle({id: 7, event: 'tool_state', time: new Date(stamped).toISOString(),
					data: {call_id: 'waits', server: 'builtin', tool: 'shell', state: 'awaiting_approval', previous_ms: 0.3, total_ms: 0.5}});
				live.flush();
				return rows.querySelector('[data-call-id="waits"] .c-dur').textContent;
			};
			// Waiting for 11 s when the page gets its event.
			const late = shown(null, Date.now() - 11000);
			// The gateway's clock a minute behind the browser's; its event
			// stamped 5 s ago by that clock.
			const sent = Date.now();
			const behind = shown({date: new Date(sent - 60000).toUTCString(), sent, received: Date.now()}, Date.now() - 65000);
			return JSON.stringify({late, behind});
		})()`)
		var d struct{ Late, Behind string }
		if err := json.Unmarshal([]byte(got), &d); err != nil {
			t.Fatal(got, err)
		}
		seconds := func(s string) float64 {
			var v float64
			if _, err := fmt.Sscanf(s, "%f s", &v); err != nil || !strings.HasSuffix(s, " s") {
				return -1
			}
			return v
		}
		if v := seconds(d.Late); v < 11 || v >= 20 {
			t.Errorf("a call waiting for 11 s, its event received now, shows %q", d.Late)
		}
		if v := seconds(d.Behind); v < 5 || v >= 7 {
			t.Errorf("a call waiting for 5 s by a gateway's clock a minute behind shows %q", d.Behind)
		}
	})
}

// The page with a gateway that wants a token: the page and its files load
// without it, the page asks for it when the API answers 401, and then
// shows the data and streams events with it.
func TestBrowserToken(t *testing.T) {
	t.Parallel()
	const token = "browser-test-token"
	s := startServeProc(t, workspace(t, ""), "", "--token", token)
	// The page needs no token; the API and the plain-text index do.
	for path, want := range map[string]int{"/ui/app.js": 200, "/api/tools": 401, "/mcp": 401} {
		resp, err := http.Get(s.url(path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without the token: %d, want %d", path, resp.StatusCode, want)
		}
	}
	b := newUIBrowser(t)
	b.do(chromedp.Navigate(s.url("/#catalog")))
	b.visible(`#token-dialog[open] #token-input`)
	b.visible(`#conn[data-state="unauthorized"]`)
	b.shot("asks")
	b.do(chromedp.SendKeys(chromedp.CSS(`#token-input`), token), chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	b.visible(`#tools tr[data-name="builtin__read_file"]`)
	b.visible(`#conn[data-state="live"]`)
	if got := uiEval[string](b, `sessionStorage.getItem('toolmux.token')`); got != token {
		t.Errorf("session storage holds %q", got)
	}
	// Events come with the token too; a reload keeps it.
	b.do(chromedp.Navigate(s.url("/#live")))
	b.visible(`#conn[data-state="live"]`)
	_, rec := uiAPICall(t, s, token, "builtin", "list_directory", `{"arguments": {"path": "."}}`)
	row := `#live-rows .row[data-call-id="` + fmt.Sprint(rec["id"]) + `"]`
	b.visible(row + `[data-state="success"]`)
	b.shot("with-token")
	// The token is the key named default: the call's row, and its task,
	// name their caller.
	if got := uiEval[string](b, `document.querySelector('`+row+` .c-what').textContent`); got != "builtin__list_directory · default" {
		t.Errorf("the live row names %q", got)
	}
	b.do(chromedp.Navigate(s.url("/#tasks")))
	task := `#tasks tr[data-task="` + fmt.Sprint(rec["task"]) + `"]`
	b.visible(task)
	if got := uiEval[string](b, `document.querySelector('`+task+` td.caller').textContent`); got != "default" {
		t.Errorf("the task's caller shows as %q", got)
	}

	// The token's caller (default) asks, and answers on the page (it is
	// in the admin group): the card says who asked, the call's details
	// who asked and who answered.
	b.do(chromedp.Navigate(s.url("/#live")))
	done := make(chan int, 1)
	go func() {
		code, _ := uiAPICall(t, s, token, "builtin", "shell", `{"arguments": {"command": "echo asked-by-default"}}`)
		done <- code
	}()
	card := `.approval[data-caller="default"]`
	b.visible(card + ` button[data-decision="once"]`)
	if got := b.text(card + ` .asker`); got != "asked by default" {
		t.Errorf("the card says %q", got)
	}
	// The 401 the queue got before the token was given is gone with it.
	if stale := uiEval[bool](b, `document.querySelector('#approvals > .error-box') !== null`); stale {
		t.Errorf("the approvals still show an error: %q", b.text(`#approvals > .error-box`))
	}
	id := uiEval[string](b, `document.querySelector('`+card+`').dataset.callId`)
	b.shot("asked-by")
	b.do(chromedp.Click(chromedp.CSS(card + ` button[data-decision="once"]`)))
	select {
	case code := <-done:
		if code != http.StatusOK {
			t.Fatalf("the approved call: %d", code)
		}
	case <-time.After(time.Minute):
		t.Fatal("the approved call did not return")
	}
	row = `#live-rows .row[data-call-id="` + id + `"][data-state="success"]`
	b.visible(row)
	b.do(chromedp.Click(chromedp.CSS(row + ` > summary`)))
	b.visible(row + ` .approval-detail[data-caller="default"][data-by="default"]`)
	if got := b.text(row + ` .approval-detail`); !strings.Contains(got, "asked by default") || !strings.Contains(got, "approved by default") {
		t.Errorf("the call's approval shows %q", got)
	}
	b.shot("answered-by")
}

// Thousands of events: the page keeps up, stays responsive and keeps a
// bounded number of rows.
func TestBrowserManyEvents(t *testing.T) {
	t.Parallel()
	s := startServeProc(t, workspace(t, ""), "")
	b := newUIBrowser(t)
	b.do(chromedp.Navigate(s.url("/")))
	b.visible(`#conn[data-state="live"]`)

	// Every call is six events (four states, its input and its result):
	// 850 calls make 5100.
	const calls, workers = 850, 8
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < calls; i += workers {
				if code, rec := uiAPICall(t, s, "", "builtin", "list_directory", `{"arguments": {"path": "."}}`); code != http.StatusOK {
					t.Errorf("call %d: %d %v", i, code, rec)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// The last call's row in its final state means the page has read
	// everything before it.
	_, last := uiAPICall(t, s, "", "builtin", "list_directory", `{"arguments": {"path": "."}}`)
	b.visible(`#live-rows .row[data-call-id="` + fmt.Sprint(last["id"]) + `"][data-state="success"]`)
	t.Logf("%d calls made and shown in %s", calls+1, time.Since(start).Round(time.Millisecond))

	type stats struct {
		Events, Missed, Rows int
		Capped               bool
		Sum                  int
	}
	raw := uiEval[string](b, `JSON.stringify({
		events: Number(document.getElementById('live-stats').dataset.events),
		missed: [...document.querySelectorAll('#live-rows .row[data-kind="gap"]')].length,
		rows: document.querySelectorAll('#live-rows > .row').length,
		capped: !document.getElementById('live-capped').hidden,
		sum: 1 + 1,
	})`)
	var st stats
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("page: %+v", st)
	if st.Sum != 2 {
		t.Errorf("the page did not evaluate a script: %s", raw)
	}
	if st.Events < 5000 && st.Missed == 0 {
		t.Errorf("the page counted %d events, want at least 5000", st.Events)
	}
	if st.Rows > uiMaxRows || st.Rows < uiMaxRows/2 {
		t.Errorf("%d rows in the page, want at most %d (and many)", st.Rows, uiMaxRows)
	}
	if !st.Capped {
		t.Error("the page does not say that older rows left it")
	}
	// Still responsive: the filter applies to what is shown.
	b.fill(`#live-filter`, fmt.Sprint(last["id"]))
	b.until("the filter", `[...document.querySelectorAll('#live-rows > .row')].filter(r => !r.hidden).length === 1`)
	b.fill(`#live-filter`, "")
	b.until("the filter cleared", `[...document.querySelectorAll('#live-rows > .row')].filter(r => !r.hidden).length > 1`)
	b.shot("5000-events")

	// A page opened now reads the gateway's last 500 events, no more (its
	// last call on top, about 80 calls), then earlier ones on demand, in
	// their place below.
	b.do(chromedp.Reload())
	b.visible(`#conn[data-state="live"]`)
	lastRow := `#live-rows .row[data-call-id="` + fmt.Sprint(last["id"]) + `"][data-state="success"]`
	b.visible(lastRow)
	b.until("the recent past read", `document.getElementById('live-stats').dataset.events === '500'`)
	top := `document.querySelector('#live-rows .row[data-kind="call"]').dataset.callId === '` + fmt.Sprint(last["id"]) + `'`
	if !uiEval[bool](b, top) {
		t.Error("the last call is not on top of a fresh page")
	}
	recent := uiEval[int](b, `document.querySelectorAll('#live-rows .row[data-kind="call"]').length`)
	if recent < 500/6 || recent > 500/6+2 {
		t.Errorf("a fresh page shows %d calls, want those of the last 500 events (six each)", recent)
	}
	b.do(chromedp.WaitEnabled(chromedp.CSS(`#live-earlier`)), chromedp.Click(chromedp.CSS(`#live-earlier`)))
	b.until("earlier calls below", fmt.Sprintf(`document.querySelectorAll('#live-rows .row[data-kind="call"]').length > %d + 80 && %s`, recent, top))
	b.shot("fresh-load")
}

// The page of `toolmux run --serve`, opened only after the run has
// ended, shows the whole run from its first event, every part of it in
// its end state, and no error; the process keeps serving it until Ctrl-C.
func TestBrowserRunPageOpenedLate(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	m := llmtest.OpenAI(t, llmtest.Replies(
		llmtest.Reply{Calls: []llmtest.Call{{Name: "builtin__read_file", Args: `{"path": "notes.txt"}`}}},
		llmtest.Reply{Content: "the notes say alpha"}))
	p := startRun(t, dir, nil, "run", "--serve", "127.0.0.1:0", "--model", "scripted", "--base-url", m.BaseURL(), "Read the notes")
	p.waitStderr(t, "the run has ended; its page stays at")
	match := regexp.MustCompile(`its page stays at (http://\S+/) until`).FindStringSubmatch(p.stderr.String())
	if match == nil {
		t.Fatalf("no address:\n%s", p.stderr)
	}
	b := newUIBrowser(t)
	b.do(chromedp.Navigate(match[1]))
	b.visible(`#conn[data-state="live"]`)
	b.visible(`#live-rows .row[data-kind="workflow"][data-state="done"]`)
	b.visible(`#live-rows .row[data-kind="agent"][data-state="done"]`)
	b.visible(`#live-rows .row[data-name="builtin__read_file"][data-state="success"]`)
	b.visible(`#live-rows .row[data-kind="message"]`)
	b.until("every model turn done", `(() => {
		const turns = [...document.querySelectorAll('#live-rows .row[data-kind="llm"]')];
		return turns.length === 2 && turns.every(r => r.dataset.state === 'done');
	})()`)
	if banner := uiEval[bool](b, `!document.getElementById('banner').hidden`); banner {
		t.Errorf("the page shows a banner: %q", b.text(`#banner`))
	}
	if cards := uiEval[int](b, `document.querySelectorAll('.approval').length`); cards != 0 {
		t.Errorf("%d approval cards on the page of an ended run", cards)
	}
	b.shot("ended")
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr)
	}
}

// The Fleet tab of a fleet's gateway (serve --nats-listen) with a real
// worker process: the worker by name with its server's health; a run
// submitted with the fleet package counted running, listed under its
// worker, and its link opening the run's task, which follows the run
// while it runs and "Follow live" shows in the Live view; then the
// counts at done. The model holds the run's last turn until the test has
// looked at it running, so nothing depends on timing.
func TestBrowserFleet(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	answer := func() { once.Do(func() { close(release) }) }
	script := appendScript(0)
	m := llmtest.OpenAI(t, func(n int, req llmtest.Request) llmtest.Reply {
		r := script(n, req)
		if len(r.Calls) == 0 {
			<-release
		}
		return r
	})
	// Registered after the model server: runs before its Close, which
	// waits for the request held here.
	t.Cleanup(answer)
	dir := fleetWorkspace(t, m)
	natsAddr := fmt.Sprintf("127.0.0.1:%d", testservers.FreePort(t))
	data := t.TempDir()
	s := startFleetGateway(t, dir, data, natsAddr)
	url := natsListenURL(t, data, natsAddr)
	startWorker(t, dir, url, "--name", "page-worker", "--concurrency", "2")

	b := newUIBrowser(t)
	b.do(chromedp.Navigate(s.url("/#fleet")))
	b.visible(`#conn[data-state="live"]`)
	b.visible(`nav [data-tab="fleet"][aria-current="page"]`)
	worker := `#fleet-workers tr[data-worker="page-worker"]`
	b.visible(worker)
	tile := func(state string) string {
		return uiEval[string](b, `document.querySelector('#fleet-counts [data-state="`+state+`"] .n').textContent`)
	}
	for _, st := range []string{"queued", "running", "done", "failed"} {
		if n := tile(st); n != "0" {
			t.Errorf("a new fleet shows %s %s, want 0", n, st)
		}
	}
	if got := b.text(worker + ` .load`); got != "0 / 2" {
		t.Errorf("the idle worker's load: %q, want 0 / 2", got)
	}
	b.shot("idle")

	// The panel polls while it is shown, and not while the browser hides
	// the page (another browser tab in front).
	polling := func(want string) {
		b.until("polling "+want, `document.getElementById('tab-fleet').dataset.polling === '`+want+`'`)
	}
	polling("on")
	reads := `performance.getEntriesByType('resource').filter((e) => new URL(e.name).pathname === '/api/fleet').length`
	n0 := uiEval[int](b, reads)
	b.until("the panel reading the fleet again", fmt.Sprintf(`%s >= %d`, reads, n0+2))
	uiEval[bool](b, `(Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true}), document.dispatchEvent(new Event('visibilitychange')), true)`)
	polling("off")
	uiEval[bool](b, `(delete document.visibilityState, document.dispatchEvent(new Event('visibilitychange')), true)`)
	polling("on")

	f := connectFleet(t, url)
	out := filepath.Join(t.TempDir(), "effects.txt")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := f.Submit(ctx, fleet.Request{ID: "page-run", Task: "append shown to " + out + " sleeping 0"}); err != nil {
		t.Fatal(err)
	}
	link := worker + ` a.run[data-run="page-run"]`
	b.visible(link)
	b.until("the run counted running", `document.querySelector('#fleet-counts [data-state="running"] .n').textContent === '1'`)
	if got := b.text(worker + ` .load`); got != "1 / 2" {
		t.Errorf("the busy worker's load: %q, want 1 / 2", got)
	}
	b.shot("running")

	// The run's link opens its task, which the gateway's index has from
	// the fleet's journal.
	b.do(chromedp.Click(chromedp.CSS(link)))
	b.visible(`nav [data-tab="tasks"][aria-current="page"]`)
	if hash := uiEval[string](b, `location.hash`); hash != "#tasks/page-run" {
		t.Errorf("the link went to %q", hash)
	}
	b.visible(`#task-detail[data-task="page-run"][data-status="running"] button.follow`)
	b.visible(`#tasks tr[data-task="page-run"].selected`)
	polling("off")
	b.shot("run-task")

	// Follow live: the Live view, filtered to the run, shows its rows as
	// they came from the worker (the page was open before the run
	// began): the call done, the model's turn held open.
	b.do(chromedp.Click(chromedp.CSS(`#task-detail button.follow`)))
	b.visible(`nav [data-tab="live"][aria-current="page"]`)
	b.visible(`#live-rows .row[data-name="fx__append"][data-state="success"]`)
	b.visible(`#live-rows .row[data-kind="llm"][data-state="thinking"]`)
	b.until("only the run's rows", `(() => {
		const shown = [...document.querySelectorAll('#live-rows > .row')].filter((r) => !r.hidden);
		return shown.length > 0 && shown.every((r) => r.querySelector('.c-task').dataset.task === 'page-run');
	})()`)
	b.shot("run-live")

	// Back on the run's task, which turns success by itself when the
	// model answers.
	b.do(chromedp.NavigateBack())
	b.visible(`#task-detail[data-task="page-run"][data-status="running"]`)
	answer()
	b.visible(`#task-detail[data-task="page-run"][data-status="success"]`)
	b.visible(`#tasks tr[data-task="page-run"] .badge.task-success`)
	if got := b.text(`#task-detail`); !strings.Contains(got, "appended shown") {
		t.Errorf("the ended run's task shows %q, want its answer", got)
	}
	b.shot("run-done")

	// The Fleet tab again: the run counted done, the worker idle, its
	// server ready (it served the call).
	b.do(chromedp.Click(chromedp.CSS(`nav [data-tab="fleet"]`)))
	b.until("the run counted done", `document.querySelector('#fleet-counts [data-state="done"] .n').textContent === '1' &&
		document.querySelector('#fleet-counts [data-state="running"] .n').textContent === '0'`)
	b.until("the worker idle", `document.querySelector('`+worker+` .load').textContent === '0 / 2' && !document.querySelector('`+link+`')`)
	b.visible(worker + ` .server[data-server="fx"] .badge.state-ready`)
	// ...and listed among the recent runs: done, by its worker, with its
	// duration and no error.
	recent := `#fleet-recent tr[data-run="page-run"][data-state="done"]`
	b.visible(recent)
	if got := uiEval[string](b, `JSON.stringify([...document.querySelector('`+recent+`').cells].map((c) => c.textContent))`); !regexp.MustCompile(`^\["page-run","done","page-worker","[0-9.]+ (ms|s)","[^"]+",""\]$`).MatchString(got) {
		t.Errorf("the recent run's row: %s", got)
	}
	if !uiEval[bool](b, `document.getElementById('fleet-recent-empty').hidden`) {
		t.Error("the recent runs say none has ended")
	}
	b.shot("done")
	if got := lines(t, out); len(got) != 1 || got[0] != "shown" {
		t.Errorf("the run's side effects: %q, want one line", got)
	}
	// The Live view's workflow row of the run ended too.
	b.do(chromedp.Click(chromedp.CSS(`nav [data-tab="live"]`)))
	b.visible(`#live-rows .row[data-kind="workflow"][data-state="done"]`)

	// The panel's rendering of what a real fleet of one does not show:
	// several workers (sorted by name), servers in every health state
	// with the badges of the Servers tab, uptime by the worker's clock,
	// ids that need escaping in a link.
	got := uiEval[string](b, `(async () => {
		const {Fleet, runHref} = await import('/ui/fleet.js');
		const el = (tag) => document.createElement(tag);
		const table = el('table');
		table.append(el('tbody'));
		const recent = el('table');
		recent.append(el('tbody'));
		const f = new Fleet({tab: el('a'), counts: el('div'), workers: table, count: el('span'), empty: el('p'), error: el('div'), updated: el('span'),
			recent, recentEmpty: el('p')});
		f.render({runs: {queued: 180, running: 3, done: 15, failed: 2}, recent: [
			{id: 'bad/1', status: 'failed', worker: 'b', started: '2026-11-25T03:00:00Z', ended: '2026-11-25T03:00:01.52Z', duration_ms: 1520,
				error_kind: 'model_failed', error: 'the model provider answered 400'},
			{id: 'given', status: 'failed', ended: '2026-11-25T02:59:00Z', duration_ms: 0, error_kind: 'given_up', error: 'given up after 3 deliveries'},
			{id: 'ok', status: 'done', worker: 'a', started: '2026-11-25T02:10:00Z', ended: '2026-11-25T02:10:42Z', duration_ms: 42000},
		], workers: [
			{name: 'b', host: 'box-b', pid: 2, concurrency: 4, running: ['r/1', 'r 2'], started: '2026-11-25T02:00:00Z', seen: '2026-11-25T03:02:03Z',
				servers: {web: 'degraded', browser: 'ready', gpu: 'failed'}},
			{name: 'a', host: 'box-a', pid: 1, concurrency: 1, running: [], started: '2026-11-25T02:10:00Z', seen: '2026-11-25T02:10:42Z'},
		]});
		return JSON.stringify({
			counts: [...f.els.counts.children].map((c) => c.dataset.state + '=' + c.querySelector('.n').textContent + ' ' + c.querySelector('.label').textContent),
			rows: [...table.tBodies[0].rows].map((r) => [r.dataset.worker, r.querySelector('.load').textContent, r.cells[4].textContent,
				[...r.querySelectorAll('a.run')].map((a) => a.getAttribute('href')),
				[...r.querySelectorAll('.server')].map((s) => s.dataset.server + ':' + s.querySelector('.badge').className)]),
			recent: [...recent.tBodies[0].rows].map((r) => [r.dataset.run, r.querySelector('a.run').getAttribute('href'),
				r.querySelector('.badge').className, r.cells[2].textContent, r.cells[3].textContent, r.cells[5].textContent]),
			href: runHref('x#y'),
		});
	})()`)
	want := `{"counts":["queued=180 waiting","running=3 running","done=15 done","failed=2 failed"],` +
		`"rows":[["a","0 / 1","42.0 s",[],[]],` +
		`["b","2 / 4","1h 02m",["#tasks/r%2F1","#tasks/r%202"],["browser:badge state-ready","gpu:badge state-failed","web:badge state-degraded"]]],` +
		`"recent":[["bad/1","#tasks/bad%2F1","badge state-failed","b","1.52 s","model_failed: the model provider answered 400"],` +
		`["given","#tasks/given","badge state-failed","","","given_up: given up after 3 deliveries"],` +
		`["ok","#tasks/ok","badge state-done","a","42.0 s",""]],` +
		`"href":"#tasks/x%23y"}`
	if got != want {
		t.Errorf("the panel's rendering:\n got %s\nwant %s", got, want)
	}
}

// The Fleet tab of serve --nats URL when the fleet's NATS server goes
// away: the tab says why (fleet_unavailable, the gateway's 502) instead of
// showing stale numbers as current, and recovers by itself when the
// server is back (restarted on its port with its data).
func TestBrowserFleetUnavailable(t *testing.T) {
	t.Parallel()
	dir := fleetWorkspace(t, appendModel(t, 0))
	natsDir := t.TempDir()
	ns := startNATS(t, natsDir, 0)
	port := ns.Addr().(*net.TCPAddr).Port
	url := natsURL(ns)
	s := startServeProc(t, dir, "", "--nats", url)
	w := startWorker(t, dir, url, "--name", "steady")

	b := newUIBrowser(t)
	b.do(chromedp.Navigate(s.url("/#fleet")))
	worker := `#fleet-workers tr[data-worker="steady"]`
	b.visible(worker)
	ns.Shutdown()
	b.visible(`#tab-fleet.stale #fleet-error`)
	if got := b.text(`#fleet-error`); !strings.Contains(got, "fleet_unavailable") {
		t.Errorf("the tab says %q, want the error's kind", got)
	}
	b.shot("unavailable")
	startNATS(t, natsDir, port)
	b.do(chromedp.WaitNotVisible(chromedp.CSS(`#fleet-error`)))
	b.visible(`#tab-fleet:not(.stale) ` + worker)
	b.shot("back")

	// The worker and the gateway stop while their NATS server is up: the
	// restarted server's cleanup, registered last, would run before theirs.
	stop := func(what string, p *os.Process, exited <-chan struct{}) {
		_ = p.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			// Its goroutines' stacks, on its stderr (quoted by its
			// cleanup): what held it up.
			_ = p.Signal(syscall.SIGQUIT)
			t.Errorf("%s did not stop within 30s of SIGTERM", what)
		}
	}
	stop("the worker", w.cmd.Process, w.exited)
	if w.err != nil {
		t.Errorf("the worker: %v\n%s", w.err, w.stderr.String())
	}
	stop("serve", s.cmd.Process, s.exited)
	if s.err != nil {
		t.Errorf("serve: %v\n%s", s.err, s.stderr.String())
	}
}
