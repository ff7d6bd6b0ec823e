package tlmlx5

// Signatures on the wire as evidence for coll's check. Every eager header and every
// ready-to-receive carries the task's signature, which includes coll's (spec.Sig):
// one that equals this rank's shows that its sender initialized the collective as
// this rank did. So the transport tells coll's Witness of each, which coll counts as
// the neighbour's signature. The transport also tells coll (Tells) which peers will
// get an eager header from it in every first post, whatever the data; coll no longer
// lets that header stand in for a declaration of its own (since session 37: a
// neighbour that finished on an assumed signature ignores the data), and the
// transport's tests keep Tells and the witnessed peers together. Only eager headers
// count there: the receiver checks one when it arrives, even before its own post, and
// answers a mismatch to the sender at once (checkEager); a mismatched ready-to-receive
// is only kept as evidence until the receiver's send starts.

// seen tells coll that peer's message carried this task's signature.
func (k *task) seen(peer int) {
	if w := k.spec.Witness; w != nil {
		w.Seen(peer)
	}
}

// Tells reports whether every first post sends peer an eager header with the
// signature (driver.Task.Tells): an eager send (with or without a credit, data or
// none) that depends on no other operation, so that it starts at Post whatever the
// other ranks do (one that waits for data a mismatched peer never sends would tell
// nothing).
func (k *task) Tells(peer int) bool {
	for i := range k.ops {
		o := &k.ops[i]
		if o.peer != peer || o.ndeps != 0 {
			continue
		}
		if o.kind == opSend && o.eager {
			return true
		}
	}
	return false
}
