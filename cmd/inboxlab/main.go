// Command inboxlab is the inbox's lab: the demo (the handler that ran
// twice), the crash tests and the benchmarks. Run 'inboxlab help'.
package main

import "github.com/txinbox/inbox/cmd/inboxlab/labcli"

func main() { labcli.Run() }
