package llm

import (
	"errors"
	"fmt"

	"github.com/toolmux/toolmux/config"
)

// ErrNoModel is returned by FromConfig for a configuration that names no
// model.
var ErrNoModel = errors.New("no model is configured")

// FromConfig returns the model a `model:` section describes: NewOpenAI for
// provider openai (the default), NewAnthropic for anthropic.
func FromConfig(m config.Model) (Model, error) {
	if !m.Set || m.Name == "" {
		return nil, ErrNoModel
	}
	retry := RetryPolicy{MaxAttempts: m.Retry.MaxAttempts, InitialBackoff: m.Retry.InitialBackoff, MaxBackoff: m.Retry.MaxBackoff}
	switch m.Provider {
	case "", config.ProviderOpenAI:
		return NewOpenAI(OpenAIConfig{BaseURL: m.BaseURL, APIKey: m.APIKey, Model: m.Name, Temperature: m.Temperature,
			TopP: m.TopP, MaxTokens: m.MaxTokens, Extra: m.Extra, RequestTimeout: m.Timeout, Retry: retry})
	case config.ProviderAnthropic:
		return NewAnthropic(AnthropicConfig{BaseURL: m.BaseURL, APIKey: m.APIKey, Model: m.Name, Temperature: m.Temperature,
			TopP: m.TopP, MaxTokens: m.MaxTokens, Extra: m.Extra, RequestTimeout: m.Timeout, Retry: retry})
	}
	return nil, fmt.Errorf("llm: unknown provider %q (openai or anthropic)", m.Provider)
}
