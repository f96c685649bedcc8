package labcli

// ParseDBFaults is parseDBFaults, for the package's external tests.
var ParseDBFaults = parseDBFaults
