package inboxnats

import (
	"strconv"
	"strings"
)

// termWithReason reports whether a server of version (as the connection
// reports it, such as "2.10.4") honours TermWithReason. Servers before
// 2.10.4 ignore it and do not terminate the message, so an unknown
// version, or none (disconnected), gets a plain Term.
func termWithReason(version string) bool {
	return versionAtLeast(version, 2, 10, 4)
}

// versionAtLeast reports whether version, "major.minor.patch" with an
// optional suffix ("2.11.0-RC.1"), is at least major.minor.patch. An
// unparsable version is not.
func versionAtLeast(version string, major, minor, patch int) bool {
	core, _, _ := strings.Cut(version, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return false
	}
	var v [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return false
		}
		v[i] = n
	}
	want := [3]int{major, minor, patch}
	for i := range v {
		if v[i] != want[i] {
			return v[i] > want[i]
		}
	}
	return true
}
