package inboxcli

// ParseDuration is parseDuration, for the package's external tests.
var ParseDuration = parseDuration
