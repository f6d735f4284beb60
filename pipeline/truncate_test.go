package pipeline

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolmux/toolmux/tool"
)

func TestTruncateKeepsHeadAndTailAndSpills(t *testing.T) {
	dir := t.TempDir()
	tr, err := newTruncator(TruncateOptions{MaxChars: 1000, Tools: []ToolLimit{{Tools: "web/scrape", MaxChars: 300}}}, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	// Multi-byte text, so cutting on bytes instead of runes would show.
	full := "HEAD-" + strings.Repeat("é€", 2000) + "-TAIL"
	next := &scripted{answers: map[string]func(tool.Call) *tool.Record{
		"web/scrape": func(c tool.Call) *tool.Record {
			return okWith(c, &tool.Result{Content: []tool.Content{
				{Type: tool.ContentText, Text: full[:len(full)/2]},
				{Type: tool.ContentImage, Data: []byte{1}, MIMEType: "image/png"},
				{Type: tool.ContentText, Text: full[len(full)/2:]},
			}})
		},
		"web/small": answerText("short"),
	}}
	h := Chain(next, tr.middleware)
	rec := h.Call(context.Background(), tool.Call{ID: "c1", Task: "task/1", Server: "web", Tool: "scrape"})
	text := rec.Result.Text()
	if n := utf8.RuneCountInString(text); n > 300 {
		t.Errorf("kept %d characters, limit 300", n)
	}
	if !utf8.ValidString(text) || !strings.HasPrefix(text, "HEAD-") || !strings.HasSuffix(text, "-TAIL") {
		t.Errorf("head/tail lost or broken: %q...%q", text[:20], text[len(text)-20:])
	}
	if len(rec.Notes) != 1 || rec.Notes[0].Data["kind"] != "output_truncated" {
		t.Fatalf("notes: %+v", rec.Notes)
	}
	path, _ := rec.Notes[0].Data["spill_path"].(string)
	if !strings.HasPrefix(path, dir) || !strings.Contains(text, path) {
		t.Errorf("spill path %q not under %s or not in the text", path, dir)
	}
	saved, err := os.ReadFile(path)
	if err != nil || string(saved) != full[:len(full)/2]+"\n"+full[len(full)/2:] {
		t.Errorf("spilled text differs (err %v, %d bytes)", err, len(saved))
	}
	if !strings.Contains(text, "toolmux cut") {
		t.Errorf("no marker: %q", text)
	}
	if rec.Result.Content[1].Type != tool.ContentImage {
		t.Errorf("non-text part dropped: %+v", rec.Result.Content)
	}
	small := h.Call(context.Background(), tool.Call{Server: "web", Tool: "small"})
	if small.Result.Text() != "short" || len(small.Notes) != 0 {
		t.Errorf("small result touched: %+v", small)
	}
}

func TestTruncateMarkerCountIsExact(t *testing.T) {
	text := strings.Repeat("a", 5000) + strings.Repeat("b", 5000)
	out := cutMiddle(textSource{{text: text, size: int64(len(text)), runes: 10000}}, 10000, 1000, "/x/y.txt", nil)
	start, end := strings.Index(out, "\n\n[..."), strings.Index(out, "...]\n\n")+len("...]\n\n")
	kept := utf8.RuneCountInString(out[:start]) + utf8.RuneCountInString(out[end:])
	var cut, total int
	i := strings.Index(out, "toolmux cut ")
	if i < 0 {
		t.Fatalf("no marker in %q", out)
	}
	if _, err := fmt.Sscanf(out[i:], "toolmux cut %d of %d characters", &cut, &total); err != nil {
		t.Fatal(err)
	}
	if total != 10000 || cut != 10000-kept || utf8.RuneCountInString(out) > 1000 {
		t.Errorf("marker says %d of %d cut; kept %d; length %d", cut, total, kept, utf8.RuneCountInString(out))
	}
}

func TestLowContextTightens(t *testing.T) {
	cfg := TruncateOptions{MaxChars: 50000, Tools: []ToolLimit{{Tools: "*/scrape*", MaxChars: 30000}},
		LowContext: LowContext{MaxChars: 10000, Tools: []ToolLimit{{Tools: "*/scrape*", MaxChars: 20000}}}}
	normal, _ := newTruncator(cfg, "", false)
	low, _ := newTruncator(cfg, "", true)
	if got := normal.limit("s", "scrape_website"); got != 30000 {
		t.Errorf("normal scrape limit %d", got)
	}
	if got := normal.limit("s", "search"); got != 50000 {
		t.Errorf("normal global limit %d", got)
	}
	if got := low.limit("s", "scrape_website"); got != 20000 {
		t.Errorf("low-context scrape limit %d", got)
	}
	if got := low.limit("s", "search"); got != 10000 {
		t.Errorf("low-context global limit %d", got)
	}
	cfg.LowContext.Enabled = true
	byConfig, _ := newTruncator(cfg, "", false)
	if got := byConfig.limit("s", "search"); got != 10000 {
		t.Errorf("low context enabled by config: %d", got)
	}
}

func TestTruncateWithoutDataDirStillCuts(t *testing.T) {
	tr, _ := newTruncator(TruncateOptions{MaxChars: 200}, "", false)
	next := &scripted{answers: map[string]func(tool.Call) *tool.Record{"s/t": answerText(strings.Repeat("x", 1000))}}
	rec := Chain(next, tr.middleware).Call(context.Background(), tool.Call{Server: "s", Tool: "t"})
	if utf8.RuneCountInString(rec.Result.Text()) > 200 || rec.Notes[0].Data["spill_error"] == nil {
		t.Errorf("%q %+v", rec.Result.Text(), rec.Notes)
	}
}
