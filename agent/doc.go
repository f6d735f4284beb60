// Package agent is toolmux's agent loop: think (a model turn: one request
// with the conversation and the tools), act (the turn's tool calls as one
// scheduler batch, through the policy, the pipeline and the manager, as
// every call of the gateway), observe (the results, with the pipeline's
// just-in-time instructions, appended), until the model answers.
//
// Around the loop: malformed, refused and repeated turns rolled back (at
// most Options.MaxConsecutiveRollbacks in a row), Options.MaxTurns and a
// context budget, loop detection, a find_tools meta-tool that narrows a
// large catalog to the best matches, sub-agents run as tools, MiroFlow's
// text protocol for models without native tool calling, and a run resumed
// from its journal after its process died (resume.go). docs/agent.md
// describes it whole; toolmux.Open and `toolmux run` assemble it from a
// configuration.
package agent
