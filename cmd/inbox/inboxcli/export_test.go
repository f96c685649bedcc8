package inboxcli

// ParseDuration is parseDuration, for the package's external tests.
var ParseDuration = parseDuration

// ParseDBFaults is parseDBFaults, for the package's external tests.
var ParseDBFaults = parseDBFaults
