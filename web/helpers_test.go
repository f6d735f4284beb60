package web

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/tool"
)

// TestMain checks that no test leaves a goroutine behind: idle keep-alive
// connections of a fetcher or a backend not closed, a worker process not
// waited for.
func TestMain(m *testing.M) {
	// PDF worker processes are this test binary. Built with -race, each
	// would sleep a second at exit (ThreadSanitizer's atexit_sleep_ms);
	// GORACE is read at process start, so this affects only the workers.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	goleak.VerifyTestMain(m)
}

// newTestFetcher returns a fetcher closed when the test ends.
func newTestFetcher(t testing.TB, opts ...Option) *Fetcher {
	t.Helper()
	f := NewFetcher(opts...)
	t.Cleanup(func() { f.Close() })
	return f
}

// wantKind fails the test unless err is a *tool.Error of the given kind.
func wantKind(t testing.TB, err error, kind tool.Kind) *tool.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one of kind %s", kind)
	}
	var te *tool.Error
	if !errors.As(err, &te) {
		t.Fatalf("error %v (%T) is not a *tool.Error; want kind %s", err, err, kind)
	}
	if te.Kind != kind {
		t.Fatalf("error kind = %s, want %s: %v", te.Kind, kind, err)
	}
	return te
}

// buildPDF assembles a PDF 1.4 file whose object i+1 has the body objs[i],
// with a correct cross-reference table and trailer (object 1 is the root).
func buildPDF(objs ...string) []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	offsets := make([]int, len(objs))
	for i, body := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, body)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// stream returns a stream object body holding data.
func stream(data string) string {
	return fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(data), data)
}

// pdfString escapes text for a PDF literal string.
func pdfString(s string) string {
	return "(" + strings.NewReplacer(`\`, `\\`, `(`, `\(`, `)`, `\)`).Replace(s) + ")"
}

// textPDF returns a valid PDF with one page per argument, each showing that
// text in Helvetica: the minimal structure real readers accept (catalog,
// page tree, font, pages with content streams).
func textPDF(title string, pages ...string) []byte {
	// 1 catalog, 2 page tree, 3 font, 4 info, then a page and its content
	// stream for each page.
	kids := make([]string, len(pages))
	for i := range pages {
		kids[i] = fmt.Sprintf("%d 0 R", 5+2*i)
	}
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(pages)),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
		fmt.Sprintf("<< /Title %s >>", pdfString(title)),
	}
	for i, text := range pages {
		objs = append(objs,
			fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>", 6+2*i),
			stream(fmt.Sprintf("BT /F1 18 Tf 72 720 Td %s Tj ET", pdfString(text))))
	}
	data := buildPDF(objs...)
	// Point the trailer at the info dictionary too.
	return bytes.Replace(data, []byte("/Root 1 0 R >>"), []byte("/Root 1 0 R /Info 4 0 R >>"), 1)
}
