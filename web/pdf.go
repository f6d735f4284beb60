package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ledongthuc/pdf"
)

// Bounds of the walk of a PDF's page tree. The library's own walk follows
// /Kids without noticing cycles, so a crafted file would loop forever; ours
// stops at these depths and counts.
const (
	maxPageTreeDepth = 32
	maxPageTreeNodes = 10_000
)

// pdfDoc is the text of a PDF.
type pdfDoc struct {
	title string
	text  string
	notes []string
}

// pdfText extracts the text of the first maxPages pages of a PDF held in
// memory, up to about maxText bytes of it (0: no cap). The parser is a pure-Go library that reports malformed input by
// panicking, so it runs under recover(); it reads the bytes through a
// reader that fails once ctx ends, which makes even a decompression bomb
// inside one page stop at the time limit.
func pdfText(ctx context.Context, data []byte, maxPages, maxText int) (doc pdfDoc, err error) {
	defer func() {
		if r := recover(); r != nil {
			doc, err = pdfDoc{}, fmt.Errorf("malformed PDF: the parser failed (%v)", r)
		}
	}()
	ra := &ctxReaderAt{ctx: ctx, r: bytes.NewReader(data)}
	r, err := pdf.NewReader(ra, int64(len(data)))
	if err != nil {
		if ctx.Err() != nil {
			return pdfDoc{}, ctx.Err()
		}
		return pdfDoc{}, fmt.Errorf("not a readable PDF: %w", err)
	}
	if r.Trailer().Key("Encrypt").Kind() != pdf.Null {
		// NewReader opened it with the empty user password, so the text
		// can be read; worth saying in case some of it is garbled.
		doc.notes = append(doc.notes, "The PDF is encrypted; it was opened with the empty password.")
	}
	doc.title = strings.TrimSpace(r.Trailer().Key("Info").Key("Title").Text())

	pages, more := collectPages(r.Trailer().Key("Root").Key("Pages"), maxPages)
	if len(pages) == 0 {
		return pdfDoc{}, errors.New("malformed PDF: no pages found")
	}
	var b strings.Builder
	var failed []string
	var firstErr error
	cutAt := 0
	for i, p := range pages {
		if maxText > 0 && b.Len() >= maxText {
			cutAt = i
			break
		}
		if err := ctx.Err(); err != nil {
			return pdfDoc{}, err
		}
		text, err := (pdf.Page{V: p}).GetPlainText(nil)
		if ctx.Err() != nil {
			return pdfDoc{}, ctx.Err()
		}
		if err != nil {
			failed = append(failed, fmt.Sprint(i+1))
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(text)
	}
	if len(failed) == len(pages) {
		return pdfDoc{}, fmt.Errorf("malformed PDF: no page could be read (%v)", firstErr)
	}
	doc.text = strings.ToValidUTF8(b.String(), "\uFFFD")
	if cutAt > 0 {
		doc.notes = append(doc.notes, fmt.Sprintf("The text was cut after page %d, at about %s.", cutAt, byteSize(int64(maxText))))
	}
	if len(failed) > 0 {
		doc.notes = append(doc.notes, fmt.Sprintf("The text of page(s) %s could not be extracted (%v).", strings.Join(failed, ", "), firstErr))
	}
	if total := r.NumPage(); more || total > len(pages) {
		if total > len(pages) {
			doc.notes = append(doc.notes, fmt.Sprintf("Only the first %d of %d pages are shown.", len(pages), total))
		} else {
			doc.notes = append(doc.notes, fmt.Sprintf("Only the first %d pages are shown.", len(pages)))
		}
	}
	if doc.text == "" {
		doc.notes = append(doc.notes, "The PDF has no extractable text; it may consist of scanned images.")
	}
	return doc, nil
}

// collectPages returns the page objects of a page tree, in order, up to
// max of them, and whether there were more. Leaves without a /Type are
// recognised by their /Kids or /Contents, as lenient readers do.
func collectPages(root pdf.Value, max int) (pages []pdf.Value, more bool) {
	visited := 0
	var walk func(v pdf.Value, depth int)
	walk = func(v pdf.Value, depth int) {
		if len(pages) >= max {
			more = true
			return
		}
		if depth > maxPageTreeDepth || visited >= maxPageTreeNodes || v.Kind() != pdf.Dict {
			return
		}
		visited++
		kids := v.Key("Kids")
		typ := v.Key("Type").Name()
		if typ == "Pages" || (typ == "" && kids.Kind() == pdf.Array) {
			for i := 0; i < kids.Len(); i++ {
				walk(kids.Index(i), depth+1)
			}
			return
		}
		if typ == "Page" || (typ == "" && v.Key("Contents").Kind() != pdf.Null) {
			pages = append(pages, v)
		}
	}
	walk(root, 0)
	return pages, more
}

// ctxReaderAt is a bytes.Reader whose reads fail once ctx ends.
type ctxReaderAt struct {
	ctx context.Context
	r   *bytes.Reader
}

// ReadAt implements io.ReaderAt.
func (c *ctxReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.ReadAt(p, off)
}
