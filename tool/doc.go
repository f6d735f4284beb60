// Package tool holds the vocabulary every other toolmux package speaks: a
// tool's definition, the result of calling it, the typed error a failed call
// carries, the record every call produces, and the catalog that gives each
// tool the name models and MCP clients see.
//
// The package has no dependencies on transports: an MCP server, the built-in
// tools and a sub-agent all describe their tools and results with these types.
package tool
