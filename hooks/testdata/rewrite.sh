#!/bin/sh
# A PreToolUse hook that rewrites the arguments (updatedInput): the
# command is run through "echo", so nothing of it is executed.
if command -v jq >/dev/null 2>&1; then
  jq -c '{hookSpecificOutput: {hookEventName: "PreToolUse", permissionDecision: "allow",
          permissionDecisionReason: "dry run", updatedInput: (.tool_input + {command: ("echo dry run: " + .tool_input.command)})}}'
else
  python3 -c '
import json, sys
i = json.load(sys.stdin)["tool_input"]
i["command"] = "echo dry run: " + i["command"]
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                  "permissionDecisionReason": "dry run", "updatedInput": i}}))'
fi
