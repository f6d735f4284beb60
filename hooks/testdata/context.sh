#!/bin/sh
# A PostToolUse hook that adds context for the model (additionalContext),
# naming the tool it read on stdin.
if command -v jq >/dev/null 2>&1; then
  jq -c '{hookSpecificOutput: {hookEventName: "PostToolUse", additionalContext: ("Checked by the hook: " + .tool_name)}}'
else
  python3 -c '
import json, sys
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "Checked by the hook: " + json.load(sys.stdin)["tool_name"]}}))'
fi
