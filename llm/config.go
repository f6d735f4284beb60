package llm

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/toolmux/toolmux/config"
)

// ErrNoModel is returned by FromConfig for a configuration that names no
// model.
var ErrNoModel = errors.New("no model is configured")

// Option adjusts FromConfig.
type Option func(*options)

type options struct{ hc *http.Client }

// WithHTTPClient makes the model's requests with hc (the runtime's, which
// sends the trace context of the request's span when tracing).
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.hc = hc } }

// FromConfig returns the model a `model:` section describes: NewOpenAI for
// provider openai (the default), NewAnthropic for anthropic.
func FromConfig(m config.Model, opts ...Option) (Model, error) {
	if !m.Set || m.Name == "" {
		return nil, ErrNoModel
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	retry := RetryPolicy{MaxAttempts: m.Retry.MaxAttempts, InitialBackoff: m.Retry.InitialBackoff, MaxBackoff: m.Retry.MaxBackoff}
	switch m.Provider {
	case "", config.ProviderOpenAI:
		return NewOpenAI(OpenAIConfig{BaseURL: m.BaseURL, APIKey: m.APIKey, Model: m.Name, Temperature: m.Temperature,
			TopP: m.TopP, MaxTokens: m.MaxTokens, Extra: m.Extra, RequestTimeout: m.Timeout, Retry: retry, HTTPClient: o.hc})
	case config.ProviderAnthropic:
		return NewAnthropic(AnthropicConfig{BaseURL: m.BaseURL, APIKey: m.APIKey, Model: m.Name, Temperature: m.Temperature,
			TopP: m.TopP, MaxTokens: m.MaxTokens, Extra: m.Extra, RequestTimeout: m.Timeout, Retry: retry, HTTPClient: o.hc})
	}
	return nil, fmt.Errorf("llm: unknown provider %q (openai or anthropic)", m.Provider)
}

// Described is a model that says who provides it and its name, for the
// chat spans (gen_ai.provider.name, gen_ai.request.model); NewOpenAI's and
// NewAnthropic's models are.
type Described interface {
	Describe() (provider, model string)
}

// Describe returns "openai" and the configured model.
func (o *OpenAI) Describe() (provider, model string) { return "openai", o.cfg.Model }

// Describe returns "anthropic" and the configured model.
func (a *Anthropic) Describe() (provider, model string) { return "anthropic", a.cfg.Model }
