// Package config loads toolmux's configuration: which MCP servers to run or
// reach, the policy (allowed tools, timeouts, retries, circuit breakers)
// that governs calls to them, and the pipeline of middlewares every call
// goes through.
//
// # Files
//
// Two formats are accepted, told apart by content rather than by name:
//
//   - toolmux.yaml, described below, toolmux's own format.
//   - The {"mcpServers": {...}} JSON of Claude Desktop, Cursor and Gemini
//     CLI, accepted unchanged, so an existing client configuration can be
//     pointed at directly.
//
// A document whose top level has "mcpServers" (or, in JSON, Gemini CLI's
// "toolDiscoveryCommand" or "toolCallCommand") and none of the toolmux
// keys is in the second format; anything else is a toolmux.yaml (which may
// itself use mcpServers alongside servers). In a JSON file of the second
// format, top-level keys other than mcpServers are ignored, because Gemini
// CLI's settings.json keeps unrelated settings there (its own telemetry
// section included, which does not make the file toolmux's), except Gemini
// CLI's toolDiscoveryCommand and toolCallCommand (below); a YAML file is
// always strict. JSON files may contain // and /* */ comments.
//
// Without -config, toolmux uses ./toolmux.yaml if it exists (see [Find]),
// and otherwise runs with only its built-in tools ([Default]).
//
// # toolmux.yaml reference
//
// Every key is optional. Durations are Go duration strings ("500ms", "30s",
// "2m", "1h30m"); a bare number is an error, since its unit would be a
// guess. Counts and durations must be positive.
//
//	workspace: .            # Root of the built-in file tools. Default: the
//	                        # directory of the config file. Relative paths are
//	                        # relative to that directory; ~ is $HOME.
//	data_dir: ~/.local/share/toolmux
//	                        # Where toolmux keeps state. Default: empty,
//	                        # leaving the choice to toolmux (conventionally
//	                        # ~/.local/share/toolmux).
//	task_log:               # The task log in data_dir (docs/tasklog.md).
//	  enabled: true         # Record tasks, calls and events. Default: true.
//	  durability: process   # process: a recorded call survives a crash or
//	                        # kill of toolmux; full: also a power cut (an
//	                        # fdatasync per group of appends). Default: process.
//	  retention:            # What the task log keeps, oldest dropped first.
//	    max_age: 30d        # Records and spill files older than this go.
//	    max_bytes: 1GiB     # Journal, index and spill files together.
//	telemetry:              # OpenTelemetry traces (docs/operations.md#traces);
//	                        # the OTEL_* variables can turn them on or off too.
//	  enabled: false        # Export spans over OTLP. Default: false.
//	  endpoint: http://localhost:4318
//	                        # The collector's base URL, unless
//	                        # OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT names one.
//	  protocol: http/protobuf # Or grpc. Default: http/protobuf.
//	  service_name: toolmux # service.name of the spans. Default: toolmux.
//	  headers: {}           # Sent with every export (an API key).
//	limits:                 # What one call may cost (docs/config.md#limits).
//	  max_depth: 64         # Deepest nesting of a call's arguments; deeper
//	                        # calls are refused (invalid_tool_params).
//	  max_result_bytes: 1MiB # Result text of an MCP server held in memory;
//	                        # more is streamed to DATA_DIR/spill.
//	  max_record_bytes: 2MiB # Largest call record; longer strings are cut.
//	  max_event_bytes: 64KiB # Largest arguments or text in one event.
//	builtin:                # toolmux's own tools. Every setting left out
//	                        # keeps the default of package builtin or web.
//	  enabled: true         # Offer toolmux's built-in tools. Default: true.
//	  max_read_bytes: 20MiB # Largest file read_file returns and grep
//	                        # searches. Sizes are integers (bytes) or have a
//	                        # unit (KiB, MiB, GiB, KB, MB, GB); at most 1GiB.
//	  max_write_bytes: 10MiB # Largest content write_file writes or edit
//	                        # produces.
//	  shell:
//	    timeout: 10m        # Limit of a command whose call gives none.
//	    max_timeout: 1h     # Largest limit a call may ask for; timeout must
//	                        # not be longer.
//	    inactivity_timeout: 5m # Kill a command silent for this long.
//	    max_output_bytes: 1MiB # Output kept in a result; the whole output
//	                        # of a longer command is saved to a file (in
//	                        # DATA_DIR/spill/shell when the caller has a
//	                        # data directory).
//	  memory_dir: ~/facts   # Where memory keeps its facts (relative: to the
//	                        # config file's directory). Default: empty, left
//	                        # to the caller (toolmux uses DATA_DIR/memory).
//	  web:
//	    timeout: 30s        # Limit of one web_fetch.
//	    max_bytes: 10MiB    # Largest body web_fetch reads.
//	    deny_private: false # Refuse loopback and private addresses.
//	    search:             # The backend of web_search, offered only with
//	                        # one.
//	      provider: serper  # serper or searxng.
//	      url: https://google.serper.dev # Optional for serper (this is
//	                        # its default), required for searxng.
//	      key: ${SERPER_API_KEY} # Optional for searxng.
//	connect_timeout: 15s    # Bound on starting a server and the MCP
//	                        # handshake. Default: 15s.
//	timeout: 20m            # Bound on one tool call. Default: 20m.
//	allow: ["*"]            # Tools to expose, as patterns (below).
//	                        # Default: empty, which allows every tool.
//	deny: ["filesystem/write_*", "*/delete_*"]
//	                        # Tools to hide; deny wins over allow.
//	retry:                  # Default retry policy for every server.
//	  max_attempts: 3       # Attempts including the first; 1 = no retry.
//	                        # Default: 3.
//	  initial_backoff: 200ms # Wait before the first retry, doubling after.
//	                        # Default: 200ms.
//	  max_backoff: 5s       # Cap on the wait. Default: 5s. Must not be
//	                        # less than initial_backoff.
//	  tools: ["search_*"]   # Tools whose calls are safe to repeat even if
//	                        # the first attempt may have reached the server
//	                        # (idempotent tools). Patterns as for allow.
//	                        # Default: none.
//	circuit_breaker:        # Default breaker for every server.
//	  failures: 5           # Consecutive transport failures that open it.
//	                        # Default: 5.
//	  cooldown: 30s         # How long it stays open before a trial call.
//	                        # Default: 30s.
//	passthrough:            # Sessions of toolmux serve's passthrough routes
//	                        # (/servers/NAME/mcp), for every server.
//	  max_sessions: 8       # Client sessions served at once per server, each
//	                        # with its own server session (a process, for
//	                        # stdio); more are refused. Default: 8.
//	  idle_timeout: 5m      # End a client session (and its server session)
//	                        # after this long without a request. Default: 5m.
//	  max_parked: 16        # Calls of 2026-07-28 clients waiting upstream
//	                        # for the client's answer to a server's question,
//	                        # at once; one more is cancelled. Default: 16.
//	  park_timeout: 2m      # Such a call waits this long for the client's
//	                        # retry, then is cancelled. Default: 2m.
//	servers:                # MCP servers by name, in the order given.
//	  everything:
//	    command: npx        # Start a stdio server with this program...
//	    args: ["-y", "@modelcontextprotocol/server-everything"]
//	    env: {API_KEY: "${EVERYTHING_KEY}"}
//	                        # ...adding these variables to toolmux's own
//	                        # environment...
//	    cwd: /tmp           # ...in this directory (relative: to the config
//	                        # file's directory; default: toolmux's own).
//	    allow: ["echo", "get-*"]  # Bare tool-name globs for this server,
//	    deny: ["get-env"]         # combined with the global ones.
//	    timeout: 30s        # Call timeout for this server. Default: the
//	                        # global timeout.
//	    tool_timeouts: {trigger-long-running-operation: 2m}
//	                        # Per-tool call timeouts, by exact tool name.
//	    connect_timeout: 20s # Default: the global connect_timeout.
//	    retry: {max_attempts: 2}
//	                        # Overrides the global retry policy; omitted
//	                        # keys keep the global values, and omitted tools
//	                        # keep the global tools that apply here.
//	    circuit_breaker: {failures: 3}
//	                        # Overrides the global breaker likewise.
//	    passthrough: {max_sessions: 4}
//	                        # Overrides the passthrough section likewise.
//	    disabled: false     # Keep the entry but do not start it.
//	  remote:
//	    url: https://example.com/mcp   # Reach an HTTP server instead.
//	    transport: http     # stdio, sse or http (streamable HTTP); "type"
//	                        # is a synonym, and "streamable-http" and
//	                        # "streamableHttp" mean http.
//	    headers: {X-Team: core}        # Sent with every request.
//	    bearer_token: ${REMOTE_TOKEN}  # Sent as "Authorization: Bearer ...".
//	  discovered:           # A command server: tools listed and run by
//	                        # commands (package cmdsource, docs/discovery.md).
//	    discover: ["./tools.sh", "discover"] # Prints the declarations; an
//	                        # argument vector, run without a shell.
//	    call: ["./tools.sh", "call"] # Runs a tool, its name appended.
//	    cwd: .              # Where both run and relative programs are
//	                        # found. Default: the config file's directory.
//	    env: {API_KEY: "${EVERYTHING_KEY}"}
//	    connect_timeout: 30s # Bound on one discovery.
//	    timeout: 10m        # Bound on one call.
//	mcpServers: {}          # Servers in the common format (below), merged
//	                        # with servers; names must be unique across both.
//	pipeline: {}            # The middlewares around every call (repair,
//	                        # validation, URL policy, dedupe, fallbacks,
//	                        # truncation, rollback, instructions, redaction)
//	                        # and their settings: see type Pipeline, and
//	                        # docs/config.md for every key. Default: each
//	                        # middleware with its defaults.
//
// A server is of exactly one kind: command (stdio), url (sse or streamable
// HTTP), or discover and call, which go together (a command server, whose
// transport is "command"). Without transport, command means stdio, url
// means sse when its path ends in /sse and streamable HTTP otherwise, and
// discover means command. Non-empty settings for another kind of server
// (args, env, cwd on a url server; headers, bearer_token on a stdio
// server; args, headers, bearer_token on a command server) are errors,
// since they would be ignored. Server names must not contain "/".
//
// YAML anchors, aliases and merge keys ("<<: *base") may be used to share
// settings between servers; keys written in a mapping win over merged ones.
//
// # Tool patterns
//
// Patterns are globs in the syntax of [path.Match]: "*" matches any run of
// characters except "/", "?" one character, "[a-z]" a class, and "\"
// escapes. At the top level (allow, deny, retry.tools) a pattern is either
// "server/tool", matching tools of the servers the server part matches, or
// a bare "tool", matching that tool in any server. Within a server, patterns
// are bare tool globs. A tool is exposed when it matches no deny pattern and
// either no allow list applies or it matches one; an empty allow list
// allows everything, so to allow nothing, deny "*". Malformed globs are
// reported when the file is loaded.
//
// # Variables
//
// String values (command, args, env values, cwd, url, headers values,
// bearer_token, discover, call, workspace, data_dir, builtin.memory_dir,
// the builtin.web.search values, every string value under pipeline, and in
// the common format httpUrl) may use ${VAR}, ${VAR:-default} (default
// when VAR is unset or empty) and ${VAR-default} (default only when
// unset). "$$" is a literal "$"; a "$" not followed by "{" or "$" is kept
// as is; mapping keys are never expanded. A default cannot contain "}".
// An unset variable without a default is an error, except in a disabled
// server, where it expands to nothing. workspace, data_dir, cwd and
// builtin.memory_dir may start with "~" or "~/", meaning $HOME.
//
// # The common mcpServers format
//
// Each entry under mcpServers (in a Claude Desktop, Cursor or Gemini CLI
// file, or in toolmux.yaml) may have:
//
//	command, args, env, cwd   a stdio server, as above
//	url                       an SSE or HTTP server; with type (sse, http,
//	                          streamable-http, streamableHttp, or stdio for
//	                          command servers) the transport is as given,
//	                          otherwise sse if the path ends in /sse and
//	                          streamable HTTP if not
//	httpUrl                   a streamable HTTP server (Gemini CLI)
//	headers                   HTTP headers
//	timeout                   call timeout in integer milliseconds (Gemini
//	                          CLI), e.g. 30000
//	includeTools              exact tool names to allow (Gemini CLI)
//	excludeTools              exact tool names to deny; they win over
//	                          includeTools
//	disabled: true            or enabled: false, to keep but not start
//	trust: true               calls need no approval (except in plan mode)
//
// The keys description, autoApprove, alwaysAllow, oauth,
// authProviderType, targetAudience, targetServiceAccount and transportType
// belong to those clients and are accepted and ignored. Any other key is an
// error. Relative cwd is relative to the file's directory; the workspace of
// such a file is the current directory, since the directory of another
// client's settings says nothing about the files to work on.
//
// In a JSON file of this format, Gemini CLI's top-level strings
// toolDiscoveryCommand and toolCallCommand (both or neither) make the
// command server [DiscoveredServer], run in the current directory by
// "sh -c": discover is ["sh", "-c", DISCOVERY] and call is
// ["sh", "-c", CALL + ` "$@"`, "sh"], so that the tool name appended to
// call becomes $1 of the line and reaches the program as its last
// argument. The strings are passed to the shell unexpanded.
//
// # Errors
//
// Every problem is reported as an [*Error] with the file, line, column and
// dotted key path (servers.everything.timeout), and all problems in a file
// are returned together, joined with [errors.Join]. Unknown keys list the
// expected ones and suggest the nearest when it looks like a typo.
package config
