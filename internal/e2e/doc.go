// Package e2e holds the end-to-end tests: they build the real hermes-host binary and the
// first-party plugins from source, run `hermes-host serve` as a child process against loopback
// platform fakes, and drive it as a user and an operator would (chat messages, CLI commands,
// kill -9). The package has no code of its own outside its tests.
package e2e
