// Package rendezvous is how the processes of a torchrun- or
// DeepSpeed-launched job find each other before they can communicate: a
// small TCP key-value store served by rank 0 at MASTER_ADDR:MASTER_PORT,
// and the handshake every rank runs through it.
//
// Vocabulary:
//
//   - Store: a map of string keys to byte values with torch's TCPStore
//     semantics. Set writes a key; Get waits until a key exists (or the
//     timeout passes) and returns it; Wait waits for several keys; Add
//     adds to a decimal counter and returns the new value (the first Add
//     of a key starts from 0); Check and MultiGet look without waiting;
//     Delete removes. Rank 0 runs the Server; every rank, rank 0
//     included, talks to it through a Client, one request at a time on
//     one TCP connection. A Client connects retrying until its deadline,
//     so ranks may start in any order.
//   - Rendezvous: the handshake. Every rank registers its rank and
//     WORLD_SIZE; rank 0 publishes its world size and an opaque blob (the
//     128-byte NCCL unique id); every rank waits until all WORLD_SIZE ranks
//     have registered and reads the blob. It fails, on every rank it can
//     reach, with an error that says what is wrong and how to fix it:
//     a WORLD_SIZE that differs from rank 0's (naming both values and the
//     rank), a rank number registered twice, ranks that never arrive
//     within the timeout (naming their numbers), and a rank 0 that is not
//     there (naming MASTER_ADDR:MASTER_PORT). A rank that finds a problem
//     writes it under one key that every waiting rank watches, so the
//     others stop at once with the same message instead of timing out.
//   - Session: what a rendezvous leaves: the blob, every rank's
//     registration, the Client (which later steps use too: the NCCL
//     backend publishes its progress there, so that a rank whose
//     collective times out can say which ranks did not arrive), and on
//     rank 0 the Server. Close waits for the other ranks to close theirs
//     before rank 0 stops serving.
//
// The wire protocol is one JSON object per line each way (request,
// response); values travel base64-encoded. It is dszero's own, not
// torch's binary TCPStore protocol: dszero ranks talk to dszero ranks.
// The store has no authentication, like torch's: it must only be reachable
// from the job's machines (a loopback MASTER_ADDR binds the loopback
// interface only).
//
// Jobs started by mpirun do not need the store: BroadcastBlob hands rank
// 0's blob to every rank over any comm.Comm (the MPI world), as torch
// does with MPI-launched NCCL jobs.
package rendezvous
