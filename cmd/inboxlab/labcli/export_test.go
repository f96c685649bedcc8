package labcli

// ParseDBFaults is parseDBFaults, for the package's external tests.
var ParseDBFaults = parseDBFaults

// PrintChaos is printChaos, for the package's external tests.
var PrintChaos = printChaos

// RequireRedis is requireRedis, for the package's external tests.
var RequireRedis = requireRedis
