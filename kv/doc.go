// Package kv is the application layer of ps-lite: Customer (a receive queue
// and request tracker per app/customer id), SimpleApp (head/body requests
// between nodes), Worker (ps::KVWorker: sliced Push, Pull, PushPull, Wait,
// callbacks), Server (ps::KVServer: a request handler and Response) and
// DefaultHandler (ps-lite's summing store, for any numeric type and
// variable-length values).
//
// Everything runs on a started postoffice.Postoffice. The messages are
// those of C++ ps-lite (dmlc generation) field for field, so Go and C++
// workers and servers can share a job.
//
// # Differences from ps-lite
//
//   - Bad input never aborts. Invalid arguments make Push/Pull/PushPull
//     return an error at once (unsorted keys, sizes that do not match, keys
//     outside every server range); bad replies (keys not in the request,
//     missing keys, sizes that do not match the destination) make the
//     operation's Wait return an error; malformed requests are answered
//     with an error and counted by the Server.
//   - Error responses (extension): a KV response whose Meta.Body is
//     non-empty carries the server's UTF-8 error message and no data frames;
//     Head, Timestamp, CustomerID, Push and Pull are echoed as in any
//     response. The Worker's Wait returns it as a *ServerError. ps-lite never
//     sets Body on KV messages, so a C++ worker just sees a response without
//     data.
//   - A customer's queue is FIFO among messages of equal priority.
//   - Completed requests are dropped from the tracker (ps-lite keeps every
//     entry forever); Wait on a completed timestamp still returns at once,
//     and the errors of the most recent failed requests are kept for Wait.
//   - Wait returns an error when the node stops or the customer closes
//     instead of blocking forever.
package kv
