//go:build !toolmux_codemode

package main_test

// binaryTags are the build tags the tests' toolmux is built with: those
// of the tests themselves (tags_codemode_test.go).
const binaryTags = ""
