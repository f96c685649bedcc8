//go:build !unix

package chaos

// runIdle has no stand-in consumers to run where the supervisor tests,
// which signal processes, do not build.
func runIdle(string) {}
