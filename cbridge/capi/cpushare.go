package main

/*
#include "shims.h"
*/
import "C"

import (
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// A server of a C++ program shares the host's CPUs like an elasticps node
// (postoffice.Config.ShareHostCPUs) as long as only the bridge's own
// threads call into Go: the receive loop calling the KVServer's handler,
// which answers from inside the call. Over the TCP van one P per node then
// measured 30-40% more goodput for a C++ server on a shared two-core host
// (docs/performance.md).
//
// A thread of the host program that calls into Go (BytePS answers from its
// own engine threads, a worker waits on its own threads) keeps a P each
// time it returns to C: the runtime treats the C code as a system call and
// takes the P back only after a while. With one P the node's goroutines
// would wait for that, so the first such call restores GOMAXPROCS. Workers
// never lower it: their requests always come from host threads.

// shareHostCPUs reports whether a node of role may lower GOMAXPROCS.
func shareHostCPUs(role message.Role) bool { return role == message.RoleServer }

// fromHostThread is called by the exports a host program's threads use on
// the data path (requests, responses, waits, releases): if po lowered
// GOMAXPROCS and the call does not come from inside a bridge callback, it
// restores it. While nothing is lowered it is one atomic load.
func fromHostThread(po *postoffice.Postoffice, call string) {
	if po == nil || !po.HostCPUsLowered() || C.psb_in_callback() != 0 {
		return
	}
	po.RestoreHostCPUs("a thread of the program calls " + call + " (a C++ thread returning from Go keeps a P for a while)")
}
