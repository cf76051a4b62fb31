// Command capi is the C ABI of elasticps, built with -buildmode=c-archive
// into libps.a (or -buildmode=c-shared into libps.so) for C++ programs
// written against ps-lite. The C++ side is the header set in
// ../include/ps, which implements ps-lite's API on the functions declared in
// ../include/ps/internal/c_api.h; see ../README.md.
//
// The package must be main for a c-archive; main itself is never run.
//
// Files: exports.go holds every //export (its cgo preamble only declares);
// node.go the process-wide node; apps.go the SimpleApp / KVWorker / KVServer
// / Customer objects; callbacks.go the calls back into C, through the C
// shims in shims.c.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include -Wall -Wextra
#cgo CXXFLAGS: -I${SRCDIR}/../include -std=c++11 -Wall -Wextra
*/
import "C"

func main() {}
