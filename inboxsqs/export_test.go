package inboxsqs

// NotInFlight exposes notInFlight to the tests that get real errors from
// goaws.
var NotInFlight = notInFlight
