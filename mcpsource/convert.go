package mcpsource

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/tool"
)

func convertTool(server string, t *mcp.Tool) tool.Tool {
	out := tool.Tool{
		Server:       server,
		Name:         t.Name,
		Title:        t.Title,
		Description:  t.Description,
		InputSchema:  schemaMap(t.InputSchema),
		OutputSchema: schemaMap(t.OutputSchema),
	}
	if a := t.Annotations; a != nil {
		out.Annotations = tool.Annotations{
			Title:       a.Title,
			ReadOnly:    tool.Bool(a.ReadOnlyHint),
			Idempotent:  tool.Bool(a.IdempotentHint),
			Destructive: a.DestructiveHint,
			OpenWorld:   a.OpenWorldHint,
		}
		if out.Title == "" {
			out.Title = a.Title
		}
	}
	return out
}

// schemaMap returns a schema as a JSON object. The client side of the go-sdk
// already decodes schemas to maps; anything else is round-tripped.
func schemaMap(v any) map[string]any {
	switch s := v.(type) {
	case nil:
		return nil
	case map[string]any:
		return s
	default:
		b, err := json.Marshal(s)
		if err != nil {
			return nil
		}
		var m map[string]any
		if json.Unmarshal(b, &m) != nil {
			return nil
		}
		return m
	}
}

func convertResult(r *mcp.CallToolResult) *tool.Result {
	out := &tool.Result{
		Content:    make([]tool.Content, 0, len(r.Content)),
		Structured: r.StructuredContent,
		IsError:    r.IsError,
		Meta:       r.Meta,
	}
	for _, c := range r.Content {
		out.Content = append(out.Content, convertContent(c))
	}
	return out
}

func convertContent(c mcp.Content) tool.Content {
	switch c := c.(type) {
	case *mcp.TextContent:
		return tool.Content{Type: tool.ContentText, Text: c.Text, Annotations: annotations(c.Annotations), Meta: c.Meta}
	case *mcp.ImageContent:
		return tool.Content{Type: tool.ContentImage, Data: c.Data, MIMEType: c.MIMEType, Annotations: annotations(c.Annotations), Meta: c.Meta}
	case *mcp.AudioContent:
		return tool.Content{Type: tool.ContentAudio, Data: c.Data, MIMEType: c.MIMEType, Annotations: annotations(c.Annotations), Meta: c.Meta}
	case *mcp.EmbeddedResource:
		out := tool.Content{Type: tool.ContentResource, Annotations: annotations(c.Annotations), Meta: c.Meta}
		if r := c.Resource; r != nil {
			out.Resource = &tool.ResourceContents{URI: r.URI, MIMEType: r.MIMEType, Text: r.Text, Blob: r.Blob, Meta: r.Meta}
		}
		return out
	case *mcp.ResourceLink:
		return tool.Content{Type: tool.ContentResourceLink, URI: c.URI, Name: c.Name, Title: c.Title,
			Description: c.Description, MIMEType: c.MIMEType, Size: c.Size, Annotations: annotations(c.Annotations), Meta: c.Meta}
	default:
		// A content type newer than this code: keep its JSON rather than drop it.
		b, _ := json.Marshal(c)
		var probe struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(b, &probe)
		return tool.Content{Type: probe.Type, Text: string(b)}
	}
}

func annotations(a *mcp.Annotations) *tool.ContentAnnotations {
	if a == nil {
		return nil
	}
	out := &tool.ContentAnnotations{LastModified: a.LastModified, Priority: a.Priority}
	for _, r := range a.Audience {
		out.Audience = append(out.Audience, string(r))
	}
	return out
}
