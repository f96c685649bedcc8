package inboxnats

// ReceiveAhead turns the consumer's receiving ahead on or off, for the
// benchmark that measures it; call it before Run.
func ReceiveAhead[TTx any](c *Consumer[TTx], on bool) { c.loop.ReceiveAhead(on) }
