package inboxsqs

// NotInFlight exposes notInFlight to the tests that get real errors from
// goaws.
var NotInFlight = notInFlight

// ReceiveAhead turns the consumer's receiving ahead on or off, for the
// benchmark that measures it; call it before Run.
func ReceiveAhead[TTx any](c *Consumer[TTx], on bool) { c.loop.ReceiveAhead(on) }
