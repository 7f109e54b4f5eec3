"""The Kubernetes target: node labels, taints and cordons, Kueue objects, ComputeDomain checks."""
