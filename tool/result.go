package tool

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Content types, as named on the MCP wire.
const (
	ContentText         = "text"
	ContentImage        = "image"
	ContentAudio        = "audio"
	ContentResource     = "resource"
	ContentResourceLink = "resource_link"
)

// Result is what a tool returned. Every content part is kept, in order, along
// with the structured content: nothing is dropped on the way to the caller.
type Result struct {
	// Content holds every part the tool returned.
	Content []Content `json:"content"`
	// Structured is the tool's structuredContent, if any.
	Structured any `json:"structuredContent,omitempty"`
	// IsError reports that the tool itself reported a failure.
	IsError bool `json:"isError,omitempty"`
	// Meta is the result's _meta, passed through unchanged.
	Meta map[string]any `json:"_meta,omitempty"`
}

// Content is one part of a result. Type says which fields are meaningful:
// Text for "text"; Data and MIMEType for "image" and "audio"; Resource for
// "resource"; URI, Name, Title, Description, MIMEType and Size for
// "resource_link". The JSON form is MCP's.
type Content struct {
	Type        string              `json:"type"`
	Text        string              `json:"text,omitempty"`
	Data        []byte              `json:"data,omitempty"`
	MIMEType    string              `json:"mimeType,omitempty"`
	Resource    *ResourceContents   `json:"resource,omitempty"`
	URI         string              `json:"uri,omitempty"`
	Name        string              `json:"name,omitempty"`
	Title       string              `json:"title,omitempty"`
	Description string              `json:"description,omitempty"`
	Size        *int64              `json:"size,omitempty"`
	Annotations *ContentAnnotations `json:"annotations,omitempty"`
	Meta        map[string]any      `json:"_meta,omitempty"`
	// Spill, when set, says that the part's text (Text, or an embedded
	// resource's Text) was too large to hold in memory: it arrived as a
	// stream written to the file Spill.Path, and the part holds only its
	// beginning and end around a marker. It is toolmux's, never sent to
	// MCP clients.
	Spill *Spill `json:"spill,omitempty"`
}

// Spill is where the whole of a part's text went when it was too large to
// hold (see Content.Spill).
type Spill struct {
	// Path is the file holding the whole text; "" when it could not be
	// written, Error saying why.
	Path  string `json:"path,omitempty"`
	Error string `json:"error,omitempty"`
	// Bytes and Chars measure the whole text.
	Bytes int64 `json:"bytes"`
	Chars int64 `json:"chars"`
}

// MarshalJSON writes MCP's form, where a text part always has "text", even
// when it is empty.
func (c Content) MarshalJSON() ([]byte, error) {
	type plain Content
	if c.Type != ContentText {
		return json.Marshal(plain(c))
	}
	return json.Marshal(struct {
		plain
		Text string `json:"text"`
	}{plain(c), c.Text})
}

// ResourceContents is the body of an embedded resource.
type ResourceContents struct {
	URI      string         `json:"uri"`
	MIMEType string         `json:"mimeType,omitempty"`
	Text     string         `json:"text,omitempty"`
	Blob     []byte         `json:"blob,omitempty"`
	Meta     map[string]any `json:"_meta,omitempty"`
}

// ContentAnnotations are MCP's hints about who a content part is for.
type ContentAnnotations struct {
	Audience     []string `json:"audience,omitempty"`
	LastModified string   `json:"lastModified,omitempty"`
	Priority     float64  `json:"priority,omitempty"`
}

// TextResult returns a result holding one text part.
func TextResult(text string) *Result {
	return &Result{Content: []Content{{Type: ContentText, Text: text}}}
}

// ErrorResult returns a result holding one text part and marked as an error
// reported by the tool itself.
func ErrorResult(text string) *Result {
	r := TextResult(text)
	r.IsError = true
	return r
}

// Text joins the text of every text part, in order, with newlines. Text of
// embedded text resources is included; binary parts are not.
func (r *Result) Text() string {
	if r == nil {
		return ""
	}
	if len(r.Content) == 1 && r.Content[0].Type == ContentText {
		return r.Content[0].Text // the common case, without a copy
	}
	var b strings.Builder
	first := true
	for _, c := range r.Content {
		var s string
		switch {
		case c.Type == ContentText:
			s = c.Text
		case c.Type == ContentResource && c.Resource != nil && c.Resource.Text != "":
			s = c.Resource.Text
		default:
			continue
		}
		if !first {
			b.WriteByte('\n')
		}
		first = false
		b.WriteString(s)
	}
	return b.String()
}

// Summary describes every part in one line each: the text of text parts and
// a short description of the others. It is what a terminal prints.
func (r *Result) Summary() string {
	if r == nil {
		return ""
	}
	var lines []string
	for _, c := range r.Content {
		switch c.Type {
		case ContentText:
			lines = append(lines, c.Text)
		case ContentImage, ContentAudio:
			lines = append(lines, fmt.Sprintf("[%s %s, %d bytes]", c.Type, c.MIMEType, len(c.Data)))
		case ContentResource:
			if c.Resource == nil {
				lines = append(lines, "[resource]")
			} else if c.Resource.Text != "" {
				lines = append(lines, fmt.Sprintf("[resource %s]\n%s", c.Resource.URI, c.Resource.Text))
			} else {
				lines = append(lines, fmt.Sprintf("[resource %s %s, %d bytes]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob)))
			}
		case ContentResourceLink:
			lines = append(lines, fmt.Sprintf("[resource link %s %s]", c.URI, c.Name))
		default:
			lines = append(lines, fmt.Sprintf("[%s]", c.Type))
		}
	}
	return strings.Join(lines, "\n")
}
