module github.com/ibcoll/ibcoll

go 1.26.0

require (
	github.com/Mellanox/rdmamap v1.2.0
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/stretchr/testify v1.12.1
	golang.org/x/image v0.48.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
