// Package bootstrap is the rendezvous of multi-process runs: a TCP
// key-value store that ranks meet at (in the manner of torch's TCPStore),
// launcher environment detection, and an allgather on the store that
// coll's TCP OOB is built from.
//
// # Pieces
//
//   - Server: the store. Rank 0 serves it (Connect does that), or a
//     separate process embeds it (IBCOLL_STORE_EXTERNAL=1 on the ranks).
//   - Client: Set, Get, Wait, Check, Add, Delete, Ping; Allgather and
//     Barrier built on them. Dial retries until its context ends, so
//     clients may start before the server.
//   - Detect reads rank, size and store address from IBCOLL_*, torchrun,
//     Open MPI, PMI or Slurm variables, in that order (a host from a
//     launcher variable takes the port IBCOLL_STORE_PORT, else MASTER_PORT,
//     else 29500); LocalRank and LocalSize follow the same launcher;
//     Connect starts and dials the store from the result.
//
// # Protocol
//
// Every message is a frame: a big-endian u32 length, then a payload of a
// version byte (ProtocolVersion), a kind byte (the op of a request, the
// status of a response), a u64 request id, and a body of fixed-size
// integers and u16/u32 length-prefixed strings; proto.go has the grammar.
// The first frame of a connection is a hello carrying the shared token;
// the server answers with its limits (value size, requests in flight,
// idle timeout). Requests are multiplexed by id: responses come in any
// order, a blocked Get holds no other call up, and a cancel frame
// withdraws a blocked Get or Wait.
//
// # Limits and bad peers
//
// A key is 1 to MaxKeyLen (1 KiB) bytes; a value at most
// ServerOptions.MaxValueSize (16 MiB by default); a Wait names at most
// MaxWaitKeys keys. The server bounds the keys and bytes it holds
// (MaxKeys, MaxBytes, which the wills held count against too), the keys
// blocked requests wait for (MaxWaiting),
// its connections (MaxConns), and each connection's requests in flight,
// blocked ones included (MaxInflight). A frame's length is checked
// before anything is allocated, a peer gets no more than a hello's few
// KiB before it has authenticated, and a large frame's buffer grows only
// as its bytes arrive; so memory stays within those limits plus one
// frame being received per connection, whatever peers send. A
// connection must send a valid hello within HandshakeTimeout, must not
// stay silent for IdleTimeout (clients ping), must deliver a frame within
// ReadTimeout of its length, and must take each response within
// WriteTimeout. A malformed frame, a wrong token or a broken protocol
// limit gets an error response when one can be written, and the
// connection is dropped; a full store answers ErrStoreFull and keeps the
// connection. Other clients never notice either. A client, for its part, gives
// the store up when a ping stays unanswered for two keepalive intervals (at least
// 5 s): a store host gone without a reset would otherwise hold its calls until
// TCP's retransmissions give up. The decoder is fuzzed
// (FuzzDecode).
//
// # Security
//
// The token (ServerOptions.Token, ClientOptions.Token, or
// $IBCOLL_STORE_TOKEN for both) is a shared secret compared in constant
// time: it keeps stray and foreign processes out of a job's store. It is
// sent in the clear and nothing is encrypted or integrity-protected; on a
// network where others can listen, the store offers no confidentiality.
// Any client that knows the token can read and write every key.
//
// # Blocking and concurrency
//
// Get and Wait block until their keys are set (or ctx ends); Allgather
// and Barrier block until all ranks arrive; Dial blocks until the server
// answers. Every blocking call takes a context and returns promptly when
// it ends: the server is told to drop the waiter. Set, Add, Delete, Check
// and Ping wait only for a round trip. On the server nothing blocks while
// holding a lock: blocked requests are waiters that a Set or Add answers.
// Client and Server are safe for concurrent use; a Client is one TCP
// connection and does not reconnect: once it is lost, every call fails
// with ErrDisconnected. Close on either is idempotent, nil-safe, and
// waits for the goroutines it started.
//
// # Ownership
//
// Set and Allgather do not keep the caller's slice after they return;
// the slices that Get and Allgather return belong to the caller. A
// Client owns its connection and goroutines, a Server its listener,
// connections and goroutines, all released by Close. The rank that
// serves the store closes its Server last, once every rank is done with
// the store (a final Barrier), since closing it fails the others' calls.
//
// Keys under "ibcoll/" belong to Allgather and Barrier. A store serves one
// job: an external store reused by a second job still holds the first
// job's round keys, so restart it between jobs.
package bootstrap
