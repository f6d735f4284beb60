// Package web provides what the built-in tools web_fetch and web_search
// need: a [Fetcher] that turns a URL into text a model can read (HTML into
// readable Markdown, PDF into text), [Searcher] backends for Serper-compatible
// and SearXNG-compatible search services, and the tool-facing layer
// ([FetchTool], [SearchTool], [Fetcher.Call], [SearchCall]) that the
// built-in source registers.
//
// Everything a remote server sends is untrusted input: bodies are read
// through a size limit, every request runs under a time limit, the PDF and
// HTML libraries run under recover(), and failures come back as
// *[tool.Error] values with kinds a caller can branch on, never as panics.
//
// PDF text is extracted in a child process, because the PDF library can
// kill the process running it in ways recover() cannot catch. The child is
// the running binary itself: importing this package installs an init hook
// that turns a process started with TOOLMUX_WEB_PDF_WORKER in its
// environment into a PDF worker, which reads a PDF on stdin, writes its
// text as JSON and exits before main runs. See [WithPDFIsolation].
package web
