//go:build toolmux_codemode

package main_test

// binaryTags: with the toolmux_codemode tag, the tests' toolmux has the
// JavaScript engine of code mode too (TestServeCodeMode).
const binaryTags = "toolmux_codemode"
