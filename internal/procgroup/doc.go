// Package procgroup runs a child process as the leader of a process group
// of its own and reaches the whole group afterwards: to signal it, to see
// whether anything of it is left, and to say how the leader ended.
//
// A command run for a tool starts processes of its own (npx starts node, a
// shell starts pipelines); signalling only the child would leave those
// behind, holding its pipes open. A group of its own also keeps a Ctrl-C in
// toolmux's terminal from reaching the child before toolmux has decided
// what to do with it.
//
// Process groups and signals exist only on Unix. Elsewhere every function
// is a harmless no-op (the group is never alive, the leader is never killed
// by a signal), so callers build everywhere; a caller that cannot work
// without groups must refuse to run there itself.
package procgroup
