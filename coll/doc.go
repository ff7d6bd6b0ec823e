// Package coll is ibcoll's public API: contexts, teams and collectives (barrier, bcast,
// gather, gatherv, scatter, scatterv, reduce, allgather, allgatherv, allreduce,
// alltoall, alltoallv, reduce_scatter) over RDMA, on buffers of any memory type, with a
// guarantee that no local failure on one rank leaves another rank waiting. What each
// collective's buffers are is package collective's table (collective.Describe); in short:
//
// # Buffers and counts
//
// Counts are in elements of Args.DType; n is the team size and b the block, the
// elements one rank contributes or receives. Rank r's block of an n·b buffer is at r·b.
//
//	collective      Src.Count                    Dst.Count
//	barrier         (none)                       (none)
//	bcast           b on every rank              (none: the root sends from Src, the others receive into it)
//	gather          b                            n·b on the root
//	gatherv         this rank's count            Counts, Displs on the root
//	scatter         n·b on the root              b
//	scatterv        Counts, Displs on the root   this rank's count
//	reduce          b                            b on the root
//	allgather       b                            n·b
//	allgatherv      this rank's count            Counts, Displs
//	allreduce       b                            b
//	alltoall        n·b (block r goes to r)      n·b (block r came from r)
//	alltoallv       Counts, Displs               Counts, Displs
//	reduce_scatter  n·b (block r is r's)         b
//
// A side a rank does not use (a gather's Dst off the root) is ignored, except bcast's
// Dst, which is refused: bcast has the one buffer. The counts of the sides a rank uses
// must be exact (a Slice or Buf may be longer than they need). With InPlace (Flags),
// the root of gather, gatherv and reduce and every rank of the non-rooted
// collectives pass Dst alone, which holds the input where the output puts it: this
// rank's block at r·b for gather and allgather (at Displs[r] for the v forms), the whole n·b
// input for alltoall and reduce_scatter (whose result lands at r·b), the vector for
// allreduce and reduce; the root of scatter and scatterv keeps its own block in Src
// and passes no Dst.
//
// # Use
//
//	cfg, _ := coll.ConfigFromEnv(coll.Config{}, os.Getenv) // IBCOLL_DEVICE, ...
//	ctx, _ := coll.NewContext(cfg)                 // import _ ".../tlmlx5" for a transport
//	team, _ := ctx.NewTeam(c, oob)                 // collective over the OOB
//	req, _ := team.Init(coll.Args{Type: coll.Gather, Root: 0, DType: coll.Uint8, ...})
//	_ = req.Post()
//	err := req.Wait(c)                             // or Test until done
//	_ = req.Close()
//
// Convenience wrappers (Team.Run, Team.Gather, Team.Allreduce, ...) do the four steps.
// A loop that repeats them can hand its closed request back, team.InitInto(req, args),
// instead of taking a new one from Init.
// LocalOOB makes goroutine ranks of one process; TCPOOB makes processes over the
// bootstrap store. Both are Messengers: a team over one exchanges small addresses at
// NewTeam and connects a rank to a peer when a collective first talks to it
// (Team.Links counts the connections); over an OOB that is no Messenger every pair
// connects at NewTeam.
//
// # Ownership
//
// A Context owns the transports (TLs) it opened; a Team belongs to its Context, a Request to its
// Team. Close is idempotent and nil-safe everywhere, and a parent's Close fails with an
// error wrapping ErrBusy while children are open. Buffers stay the caller's; they must
// stay valid from Init to the request's Close. A mem.Buffer (BufferDesc.Buf) is held
// for that long (mem.Buffer.Acquire): its Close fails with ErrBusy until the request's
// Close, since writes may still land in it; memory given by address (BufferDesc.Addr)
// is the caller's to keep. DM buffers from Context.AllocDM are the caller's too and
// must be closed before the Context. Go slices (BufferDesc.Slice) are pinned while the
// request lives and while the transport's registration cache keeps them registered.
//
// # Ordering rule
//
// Collectives on a team are initialized in the same order on every rank, as in MPI and
// UCC: the k-th Init on every rank is collective k. Init calls on one team are
// serialized; the order is the order of the calls. Type, Root, DType, Op (of a
// reduction: the other collectives ignore it), the element counts that every rank knows, and the algorithm must agree across ranks: they are
// checked, and a mismatch ends as an error wrapping ErrMismatch that names both sides
// (both roots for a Root mismatch), never at the deadline, in both outcome modes. In
// the default mode each rank declares its signature of the collective to its
// neighbours in a tree over the team (rooted at rank 0 whatever the collective's
// root), at Init and only where the edge needs it: the signature differs from the
// one it declared there before, or from the neighbour's last. A rank's first post
// succeeds only once every neighbour's signature came and equals its own, or the
// neighbour's last declaration does (it assumes the neighbour runs the same shape
// again), so a loop of collectives of one shape sends no check messages after its
// first. Where two neighbours disagree, one of them declares, the other compares (with
// the collective, or with its memory of one it finished), and the mismatch fails the
// collective on every rank that has not finished it: a rank that finished first keeps
// its success, and its output is right (a receiver's transport checks every header's
// signature, so no data crosses between ranks that disagree; a rank whose part only
// sends may succeed while its receiver fails). With Config.AllOrNothing no rank
// succeeds: the completion agreement's reports carry the signatures, the same
// declarations run beside it, and when its first post still runs a few milliseconds
// after it started, a rank that has not reported it done sends its description of the
// collective to the children of the agreement it still waits for, which compare it
// with their own as soon as they initialized the collective, posted or not. Either way
// a disagreement shows on some edge, whatever the data does (two ranks that each
// believe they are the bcast root exchange no data at all). The
// transport's own evidence (a ready-to-receive that does not fit) ends the same way.
//
// # Outcomes
//
// By default (Config.AllOrNothing off) a rank's post succeeds as soon as its own part
// is done: its receives landed, its sends completed, its staged output was copied out
// (and, on a request's first post, the signature check passed). The contract: a rank
// whose post returns success has every byte of its output right; a post that failed
// on one rank fails, with a *PeerError naming that rank, on every rank that had not
// finished its part when the news reached it, and so does every later post of that
// request on a rank that has the news by then (the failed rank never posts it again;
// a rank whose part needs nothing of it, such as a scatterv receiver whose root sends
// small blocks eagerly, may succeed a later post before the news comes, with its
// output right). A rank that finished before the news
// came keeps its success: outcomes may differ between ranks, and a caller that needs
// them equal sets AllOrNothing. With it a post succeeds only when every rank finished
// it (a completion agreement over a k-nomial tree, after the data: 2 control hops per
// tree level on every post), so a failure anywhere, even a late copy-out, fails the
// post everywhere. A barrier always ends by the agreement, which is what synchronizes
// it.
//
// # No hang
//
// Every Init takes the team's next sequence number k, including an Init that fails: a
// rank whose Init fails tells its peers that k failed, since they will post k and
// wait. A rank that fails at Post, at the copy-in or copy-out of a staged buffer, at a
// registration, on a queue-pair error or at its deadline tells its peers too, and
// every peer still in the post ends it with an error wrapping ErrPeerFailed (a
// *PeerError naming the rank and the cause). The news floods over a sparse graph: a
// tree over the team (radix 8) plus the peers the collective's task talks to, each
// rank forwarding it once, so it reaches every rank without every rank messaging
// every other, and every rank that waits for the failed one hears it directly (a
// mismatch's news, and that of a failed Init, which has no task, go to every rank).
//
// Wait honours its ctx; Config.Timeout bounds a post whose Wait has no deadline (and
// Test). A post that times out or is cancelled fails here and is told to the peers. A
// rank that stalls is caught by the others' deadlines. With AllOrNothing one exception
// keeps outcomes equal: once this rank reported the post done, only the agreement's
// root decides. A deadline passing then sends a no-vote up (which fails the post
// everywhere unless the root already decided success) and waits for the decision,
// past the ctx, for at most Config.Timeout more; a decision that cannot come (its path
// is gone, or that time passed) ends the post with ErrTeamBroken, so the uncertainty
// shows. A team that breaks meanwhile likewise leaves such a post to the decision.
//
// A failed post returns only when no peer can still write into this rank's buffers:
// every peer that the transport says may still write here (one this rank exposed a
// buffer to whose data has not landed) has acknowledged the failure (RC ordering puts
// its acknowledgement after its last write), bounded by Config.AbortGrace; a peer that
// does not answer in time is cut off (its queue pair moved to the error state) and the
// team breaks. Two waits go past the grace: a peer whose link is still being made is not
// cut off before the link is made or fails (tlmlx5 bounds it at 30 s), and work of the
// post that the transport still holds after the grace is waited for at most 5 s more,
// after which every peer of the post is cut off and the team breaks. Buffers of the transport's own that the failed request never reads
// again need no wait where the transport keeps them until the peer writes or answers
// (tlmlx5's scratch that reductions receive into: the failed post's, and the next
// post's named by ready-to-receives sent ahead in persistent reductions; and the two
// buffers of its own that hold a persistent collective's staged output, such as a
// gather root's or a scatter leaf's): a peer that has not reached the collective yet,
// or finished the post and went idle, is then not waited for. Where data lands in the
// caller's buffers (a gather's root, a bcast, the ring allreduce when not in place)
// or in staging scratch that the transport does not hold itself, the failed post
// waits for the peer's answer. A rank answers whether or not it is in a call: while no call of
// its program polls its team for a quarter of the grace, a goroutine of the team's
// polls it at that period (the keeper), so a rank whose program computes answers
// within a quarter of the grace (an eighth where its last call came just before: the
// keeper looks more often while calls come). Those polls apply no deadline: a post's
// deadline (Config.Timeout from its Post, or its Wait's ctx deadline) is enforced by the
// caller's calls. Only a rank that reads nothing (its process stopped or hung, or a
// post stalled by the stall fault) is cut off. A grace
// shorter than MinAbortGrace (100 ms) is refused: it would cut off live peers that are
// merely slow to poll, and with AllOrNothing a break under a post that another rank
// reported done ends it undecided (ErrTeamBroken) there while the others succeed.
//
// A rank that closes its team tells the others which collective is the first it will
// never join: those of them running fail at once with an error naming it, and later
// ones fail at their post. It tells its linked peers directly, and leaves the same bound
// with its mailbox for the others: LocalOOB refuses their messages with it at once, and
// TCPOOB's closed mark in the store is found by a peer whose connect to it waits (within
// about a second). A user's Mailbox implementing LeavingCloser does the same. A rank that dies without closing is caught at once where
// the OOB watches its peers (a PeerWatcher, such as the TCP store's, which sees the
// dead rank's connection drop), and otherwise by the others' deadlines.
//
// # After a failure
//
// The team stays usable after a collective that failed without losing a queue pair
// (Init, allocation, registration, copy-in/out, deadline and cancellation failures):
// collective k+1 works. A queue-pair error, or a cut-off peer, breaks the team: every
// later call returns an error wrapping ErrTeamBroken, and the team only closes. A
// persistent request whose post failed cannot be posted again.
//
// # Asymmetric memory
//
// Every request goes through the asym stage (see package asym): a rank whose buffers'
// memory types differ, or that the transport cannot reach, uses scratch buffers allocated and
// registered at Init, copied in at every Post (after the re-postable check) and copied
// out at every completion; a failed copy-out fails the post. Decisions are local.
// A closed request's scratch goes back to its team, still registered, which hands it
// to the next request of the same memory type and size (up to Config.ScratchCache bytes
// idle, 256 MiB by default) and frees
// it at Team.Close. The transport reuses the task it built on that scratch, and the team
// the stage, plan and callbacks of closed requests (stagekit.go), so a repeated staged
// shape allocates only the Request that Init returns, and nothing through Team.Run or
// through Team.InitInto, which initializes into a Request the caller closed.
//
// NIC device memory (DM) comes from the context: Context.AllocDM carves it from the
// transport's pool (Config.DMCapacity bytes of the device's memory, which every context
// on the device shares). Teams of that context move such buffers in place; reductions
// stage them through host memory, since the CPU cannot address DM; a DM buffer of
// another context fails Init. DM staging scratch comes from the same pool and is never
// kept idle.
//
// # Blocking and concurrency
//
// NewTeam blocks on the OOB; Wait blocks (a short spin, then the transport's completion
// channel: a blocked waiter uses no CPU, which matters with many ranks on few cores; the
// spin is 8 polls, then up to 100 µs while the process's drivers fit its cores, or 5 ms
// where the launcher says each process of the node has a core). Init, Post and Test
// never block on peers; Team.Close waits at most 2 s for what this rank still owes its
// peers to leave. Every method is safe for concurrent use;
// several goroutines may wait on requests of one team.
//
// # Fault injection
//
// Config.Faults fails chosen steps (allocation, registration, Init, copy-in, copy-out,
// a queue-pair error, a stall, an expired deadline, team setup) on chosen ranks, for
// tests and ibcoll-perf's --fault KIND@RANK[:N].
package coll
