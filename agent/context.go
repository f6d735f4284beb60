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
	// ASCII bytes and other runes are counted apart: max(bytes/4,
	// runes*2/3) over the whole text counted plain English at 2/3 of a
	// token per byte (4000 bytes: 2666 tokens, not 1000), so budgets
	// elided results long before they were reached.
	ascii, other := 0, 0
	for i := 0; i < len(text); {
		if text[i] < utf8.RuneSelf {
			ascii++
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(text[i:])
		other++
		i += size
	}
	return (ascii+3)/4 + other
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
// elided, oldest first, while the estimate (with system, the request's
// system prompt) exceeds the context budget. The results of the latest
// turn are never elided. The history itself is kept whole (and so is the
// task log).
func (s *session) window(system string) []llm.Message {
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
		if !e.result {
			continue
		}
		// The latest turn's results count among the ones kept (they are
		// the latest), though they are sent whole even past the count.
		kept++
		if e.turn == last {
			continue
		}
		if s.shrunk || (keep >= 0 && kept > keep) {
			elide[i] = true
		}
	}
	if ctxCfg.MaxTokens > 0 {
		// The system prompt as sent: the default one when none is
		// configured, and with the text protocol the tool listing, often
		// the largest part of the request.
		total := Tokens(system)
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
			// Made once per result: an elided result stays elided in
			// every later request.
			if e.elided == "" {
				s.history[i].elided = fmt.Sprintf("[Result elided to save context: %d characters. Call the tool again if you need it.]", len(e.msg.Content))
			}
			out[i].Content = s.history[i].elided
			elided++
		}
	}
	s.res.Elided = max(s.res.Elided, elided)
	return out
}
