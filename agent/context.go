package agent

import (
	"fmt"
	"unicode/utf8"

	"github.com/toolmux/toolmux/llm"
)

// Tokens estimates the tokens of text the way budgets here are counted:
// about four bytes of English or code per token, one per rune for scripts
// that take more bytes per character. It errs on the high side, which is
// the safe side of a budget.
func Tokens(text string) int {
	n := len(text)
	if n == 0 {
		return 0
	}
	runes := utf8.RuneCountInString(text)
	return max((n+3)/4, runes*2/3)
}

// messageTokens estimates one message with its overhead.
func messageTokens(m llm.Message) int {
	n := 4 + Tokens(m.Content)
	for _, c := range m.ToolCalls {
		n += 4 + Tokens(c.Name) + Tokens(c.Arguments)
	}
	return n
}

// window is the history as the next request sends it: the latest
// KeepToolResults tool results whole, older ones elided, and more of them
// elided, oldest first, while the estimate exceeds the context budget.
// The results of the latest turn are never elided. The history itself is
// kept whole (and so is the task log).
func (s *session) window() []llm.Message {
	ctxCfg := s.a.cfg.Context
	keep := ctxCfg.KeepToolResults
	last := 0
	if n := len(s.history); n > 0 {
		last = s.history[n-1].turn
	}
	elide := make([]bool, len(s.history))
	kept := 0
	for i := len(s.history) - 1; i >= 0; i-- {
		e := s.history[i]
		if !e.result || e.turn == last {
			continue
		}
		kept++
		if s.shrunk || (keep >= 0 && kept > keep) {
			elide[i] = true
		}
	}
	if ctxCfg.MaxTokens > 0 {
		total := Tokens(s.a.cfg.SystemPrompt)
		for i, e := range s.history {
			if elide[i] {
				total += 40
			} else {
				total += messageTokens(e.msg)
			}
		}
		for i := 0; i < len(s.history) && total > ctxCfg.MaxTokens; i++ {
			e := s.history[i]
			if elide[i] || !e.result || e.turn == last {
				continue
			}
			elide[i] = true
			total += 40 - messageTokens(e.msg)
		}
	}
	out := make([]llm.Message, len(s.history))
	elided := 0
	for i, e := range s.history {
		out[i] = e.msg
		if elide[i] {
			out[i].Content = fmt.Sprintf("[Result elided to save context: %d characters. Call the tool again if you need it.]", len(e.msg.Content))
			elided++
		}
	}
	s.res.Elided = max(s.res.Elided, elided)
	return out
}
