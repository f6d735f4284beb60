// Package agent is toolmux's agent loop: think (a model turn), act (the
// turn's tool calls as one scheduler batch), observe (the results appended),
// with rollback of bad turns, limits, sub-agents and tool selection
// (SPEC §9). It is being built in parts; this far it holds the text
// protocol for models without native tool calling.
package agent
