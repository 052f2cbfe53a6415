// Package e2e holds the end-to-end tests: they build the real hermes-host binary and the
// first-party plugins from source, run `hermes-host serve` as a child process against loopback
// platform fakes, and drive it as a user and an operator would (chat messages, CLI commands,
// kill -9). The package has no code of its own outside its tests.
//
// The long tests that mostly wait (reconnect storms and back-offs, several hosts, slow platform
// answers, timers, building a plugin) call t.Parallel: they run side by side once the short ones
// are done, at most -parallel at a time (4 here unless -parallel is given: they use little CPU
// while they wait; TestMain sets it), which keeps the package, the longest of make test, inside
// its budget. A test that sets the environment (t.Setenv) stays
// sequential.
package e2e
