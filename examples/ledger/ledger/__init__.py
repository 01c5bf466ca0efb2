"""A ledger with holds: a clustered service, its workload and its linearizability model, tested with
clusterlab from outside its package (see README.md)."""
