package verbs

import (
	"strconv"
)

// gidIndexEnv overrides the GID index that QPs of the ibv provider use as
// their source GID on RoCE.
const gidIndexEnv = "IBCOLL_GID_INDEX"

// chooseGIDIndex picks the source GID of a port's QPs. InfiniBand routes by
// LID inside a subnet, so its index is 0, the port GID. RoCE needs a GID
// that the peer can route to: an IPv4-mapped RoCE v2 GID is the one most
// fabrics route (v2 is UDP/IP; v1 and link-local v2 GIDs only reach the
// same L2 segment), then any RoCE v2 GID, then entry 0 as the kernel's own
// default. override (the value of $IBCOLL_GID_INDEX) wins when set.
// Kept free of cgo so that it is tested on every build.
func chooseGIDIndex(ll LinkLayer, gids []GIDEntry, override string) (int, error) {
	if override != "" {
		n, err := strconv.Atoi(override)
		if err != nil || n < 0 || n > 255 {
			return 0, invalid("Open", "%s=%q is not a GID index in [0, 255]", gidIndexEnv, override)
		}
		return n, nil
	}
	if ll != LinkLayerEthernet {
		return 0, nil
	}
	for _, g := range gids {
		if g.Type == GIDTypeRoCEv2 && g.IsIPv4() {
			return g.Index, nil
		}
	}
	for _, g := range gids {
		if g.Type == GIDTypeRoCEv2 {
			return g.Index, nil
		}
	}
	return 0, nil
}
