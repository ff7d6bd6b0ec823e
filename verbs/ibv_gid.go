package verbs

// chooseGIDIndex picks the source GID of a port's QPs. InfiniBand routes by
// LID inside a subnet, so its index is 0, the port GID. RoCE needs a GID
// that the peer can route to: an IPv4-mapped RoCE v2 GID is the one most
// fabrics route (v2 is UDP/IP; v1 and link-local v2 GIDs only reach the
// same L2 segment), then any RoCE v2 GID, then entry 0 as the kernel's own
// default. override (Options.GIDIndex, checked by Open) wins when it is
// positive. Kept free of cgo so that it is tested on every build.
func chooseGIDIndex(ll LinkLayer, gids []GIDEntry, override int) int {
	if override > 0 {
		return override
	}
	if ll != LinkLayerEthernet {
		return 0
	}
	for _, g := range gids {
		if g.Type == GIDTypeRoCEv2 && g.IsIPv4() {
			return g.Index
		}
	}
	for _, g := range gids {
		if g.Type == GIDTypeRoCEv2 {
			return g.Index
		}
	}
	return 0
}
