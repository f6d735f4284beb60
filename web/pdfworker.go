package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// PDF text extraction runs, by default, in a child process: the toolmux
// binary itself, re-executed with pdfWorkerEnv set. The PDF library has
// failure modes recover() cannot catch, found while writing this package: a
// cross-reference entry that puts an object stream inside itself recurses
// until the Go stack limit (fatal "stack overflow"), and a cross-reference
// section numbering objects from 4000000000 allocates until the process
// dies ("out of memory"); both take a few hundred bytes, and a ToUnicode
// CMap inside a compressed stream can do the same where no scan of the
// file's bytes would see it. A web page can link such a file, so it must
// cost one call, not the gateway serving every agent.
//
// The child gets the PDF on stdin and answers JSON on stdout. Its memory is
// bounded (RLIMIT_DATA on Linux, a soft limit elsewhere) and it is killed
// when the fetch's time limit passes. Any binary that links this package
// can serve as the worker: init below does the work and exits before main
// runs, so no wiring is needed, in toolmux or in test binaries.

// Environment of the worker process.
const (
	// pdfWorkerEnv holds the page cap; its presence makes the process a worker.
	pdfWorkerEnv = "TOOLMUX_WEB_PDF_WORKER"
	// pdfWorkerMemEnv holds the worker's memory limit in bytes.
	pdfWorkerMemEnv = "TOOLMUX_WEB_PDF_WORKER_MEMORY"
	// pdfWorkerTextEnv holds the cap on the extracted text in bytes.
	pdfWorkerTextEnv = "TOOLMUX_WEB_PDF_WORKER_TEXT"
)

// DefaultPDFMemory is the memory limit of a PDF worker process: far more
// than any real document needs, far less than the host has.
const DefaultPDFMemory int64 = 1 << 30

// init turns the process into a PDF worker when pdfWorkerEnv is set.
func init() {
	if v, ok := os.LookupEnv(pdfWorkerEnv); ok {
		os.Exit(runPDFWorker(v, os.Stdin, os.Stdout, os.Stderr))
	}
}

// pdfWorkerReply is the worker's answer.
type pdfWorkerReply struct {
	Title string   `json:"title,omitempty"`
	Text  string   `json:"text"`
	Notes []string `json:"notes,omitempty"`
	Error string   `json:"error,omitempty"`
}

// runPDFWorker is the worker's main function; it returns the exit status.
func runPDFWorker(pages string, in io.Reader, out, errOut io.Writer) int {
	maxPages, err := strconv.Atoi(pages)
	if err != nil || maxPages <= 0 {
		maxPages = DefaultMaxPDFPages
	}
	mem, _ := strconv.ParseInt(os.Getenv(pdfWorkerMemEnv), 10, 64)
	if mem <= 0 {
		mem = DefaultPDFMemory
	}
	limitMemory(mem)
	maxText, _ := strconv.Atoi(os.Getenv(pdfWorkerTextEnv))

	data, err := io.ReadAll(in)
	if err != nil {
		fmt.Fprintf(errOut, "reading the PDF: %v\n", err)
		return 1
	}
	var reply pdfWorkerReply
	doc, err := pdfText(context.Background(), data, maxPages, maxText)
	if err != nil {
		reply.Error = err.Error()
	} else {
		reply = pdfWorkerReply{Title: doc.title, Text: doc.text, Notes: doc.notes}
	}
	if err := json.NewEncoder(out).Encode(reply); err != nil {
		fmt.Fprintf(errOut, "writing the reply: %v\n", err)
		return 1
	}
	return 0
}

// limitMemory bounds the worker's memory: a soft limit that makes the
// garbage collector work harder as it nears, and on Linux a hard one, so
// that a runaway allocation ends the worker rather than starving the host.
func limitMemory(n int64) {
	debug.SetMemoryLimit(n)
	hardLimitMemory(n)
}

// pdfExtract turns PDF bytes into text: in a worker process, or in this
// process when isolation is off or the executable cannot be found.
func (f *Fetcher) pdfExtract(ctx context.Context, data []byte) (pdfDoc, error) {
	maxText := int(min(2*f.maxBytes, 1<<30))
	if !f.pdfIsolation {
		return pdfText(ctx, data, f.maxPDFPages, maxText)
	}
	exe := selfExecutable()
	if exe == "" {
		return pdfText(ctx, data, f.maxPDFPages, maxText)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(),
		pdfWorkerEnv+"="+strconv.Itoa(f.maxPDFPages),
		pdfWorkerMemEnv+"="+strconv.FormatInt(f.pdfMemory, 10),
		pdfWorkerTextEnv+"="+strconv.Itoa(maxText),
	)
	cmd.Stdin = bytes.NewReader(data)
	// The reply is the text (at most maxText) JSON-escaped, at most 6
	// bytes per byte in the worst case; anything longer is not a reply.
	stdout := &limitedBuffer{limit: 6*int64(maxText) + 64<<10}
	stderr := &limitedBuffer{limit: 64 << 10, discard: true}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return pdfDoc{}, ctx.Err()
	}
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return pdfDoc{}, fmt.Errorf("the PDF parser crashed on this file (%s)", crashReason(stderr.String(), exitErr))
		}
		// The worker could not be started (no exec permission, the binary
		// gone): extracting in-process keeps the tool working.
		return pdfText(ctx, data, f.maxPDFPages, maxText)
	}
	var reply pdfWorkerReply
	if err := json.Unmarshal(stdout.Bytes(), &reply); err != nil {
		return pdfDoc{}, fmt.Errorf("the PDF worker process gave no valid reply: %v", err)
	}
	if reply.Error != "" {
		return pdfDoc{}, errors.New(reply.Error)
	}
	return pdfDoc{title: reply.Title, text: reply.Text, notes: reply.Notes}, nil
}

// selfExecutable returns the path of the running binary, "" if unknown. On
// Linux /proc/self/exe works even when the binary was replaced on disk
// since it started (an upgrade in place).
func selfExecutable() string {
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe"
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
}

// crashReason picks the line of a crashed worker's stderr that says why:
// Go's "fatal error: ..." or "panic: ...", else the first line, else the
// exit status.
func crashReason(stderr string, exitErr *exec.ExitError) string {
	first := ""
	for line := range strings.Lines(stderr) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "fatal error:") || strings.HasPrefix(line, "panic:") ||
			strings.HasPrefix(line, "runtime: out of memory") {
			return cut(line, 200)
		}
		if first == "" {
			first = line
		}
	}
	if first != "" {
		return cut(first, 200) + "; " + exitErr.String()
	}
	return exitErr.String()
}

// limitedBuffer is a bytes.Buffer with a size limit. Past it, writes fail,
// or, with discard, are dropped silently: a crash report's reason comes
// first and the goroutine dumps after it, so the head is what matters.
type limitedBuffer struct {
	bytes.Buffer
	limit   int64
	discard bool
}

// Write implements io.Writer.
func (b *limitedBuffer) Write(p []byte) (int, error) {
	room := b.limit - int64(b.Len())
	if int64(len(p)) <= room {
		return b.Buffer.Write(p)
	}
	if !b.discard {
		return 0, errors.New("reply too long")
	}
	if room > 0 {
		b.Buffer.Write(p[:room])
	}
	return len(p), nil
}
