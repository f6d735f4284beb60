package policy

// The built-in tools the defaults name. They are spelled out rather than
// imported from package builtin so that policy depends on nothing but the
// tool vocabulary; config reserves the server name "builtin" for them.
const (
	builtinServer    = "builtin"
	builtinWriteFile = "builtin/write_file"
	builtinEdit      = "builtin/edit"
	builtinMemory    = "builtin/memory"
)

// PlanDenyMessage is the message of plan mode's refusal, shown to the model.
const PlanDenyMessage = "plan mode allows only read-only tools"

// DefaultRules returns the rules mode adds after the user's, in the order
// they are tried. Together they match every call, so every call gets a
// decision:
//
//	mode       read-only   builtin/write_file,   builtin/memory     anything else
//	           tools       builtin/edit                             (shell included)
//	plan       allow       deny                  list, recall only  deny
//	default    allow       ask                   allow              ask
//	auto_edit  allow       allow                 allow              ask
//	yolo       allow       allow                 allow              allow
//
// builtin/memory keeps the facts of one task in toolmux's own store (no
// workspace file, no network, nothing run), so asking before each note
// would only teach people to approve without reading. Plan mode, which
// promises read-only calls, lets it list and recall facts but not save them.
func DefaultRules(mode Mode) []Rule {
	readOnly := Rule{Name: string(mode) + " mode: read-only tools", ReadOnly: ptr(true), Action: Allow}
	memory := Rule{Name: string(mode) + " mode: memory", Tools: []string{builtinMemory}, Action: Allow}
	switch mode {
	case ModePlan:
		return []Rule{
			readOnly,
			{Name: "plan mode: memory reads", Tools: []string{builtinMemory}, Args: map[string]string{"action": `^(list|recall)$`}, Action: Allow},
			{Name: "plan mode: everything else", Action: Deny, Message: PlanDenyMessage},
		}
	case ModeDefault:
		return []Rule{
			readOnly,
			memory,
			{Name: "default mode: everything else", Action: Ask},
		}
	case ModeAutoEdit:
		return []Rule{
			readOnly,
			{Name: "auto_edit mode: file edits", Tools: []string{builtinWriteFile, builtinEdit}, Action: Allow},
			memory,
			{Name: "auto_edit mode: everything else", Action: Ask},
		}
	case ModeYolo:
		return []Rule{{Name: "yolo mode: everything", Action: Allow}}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
