// Command inbox runs and maintains a transactional inbox and its outbox:
// migrations, purges, statistics, dead letters, partitions, the relay, the
// admin page and the doctor. Run 'inbox help'. The demo, the crash tests and
// the benchmarks are the lab's: cmd/inboxlab.
package main

import "github.com/txinbox/inbox/cmd/inbox/inboxcli"

func main() { inboxcli.Run() }
