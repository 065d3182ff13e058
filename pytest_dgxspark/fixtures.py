"""Fixtures the checks use: site, targets, hosts, cluster and evidence (being built)."""
