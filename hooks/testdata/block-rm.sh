#!/bin/sh
# Claude Code's documented PreToolUse example, unchanged but for the tool:
# read the call on stdin, deny a command that holds "rm -rf".
input=$(cat)
if command -v jq >/dev/null 2>&1; then
  cmd=$(printf '%s' "$input" | jq -r '.tool_input.command // empty')
else
  cmd=$(printf '%s' "$input" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("tool_input",{}).get("command",""))')
fi
case "$cmd" in
  *"rm -rf"*)
    printf '%s\n' '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"Destructive command blocked by hook"}}'
    ;;
esac
exit 0
